//! The budgets' ledger on PostgreSQL (migration 9): `budget_accounts` and
//! `budget_holds`, changed only through `budget_reserve` and
//! `budget_settle`, each one statement: one round trip that checks every
//! budget and takes the hold atomically across hosts.

use std::collections::BTreeMap;

use super::Database;
use crate::budget::{Account, Hold, Ledger, RawReserve, RawSettled, SharedLedger, Window4};
use crate::error::Result;

impl SharedLedger for Database {
    fn reserve(
        &self,
        loop_name: &str,
        tick: u64,
        amount: f64,
        force: bool,
        accounts: &[Window4],
    ) -> Result<RawReserve> {
        let names: Vec<String> = accounts.iter().map(|a| a.account.clone()).collect();
        let starts: Vec<i64> = accounts.iter().map(|a| a.start_ms).collect();
        let ends: Vec<i64> = accounts.iter().map(|a| a.end_ms).collect();
        let caps: Vec<f64> = accounts.iter().map(|a| a.cap).collect();
        let tick = i64::try_from(tick).unwrap_or(i64::MAX);
        let row = self.with(Some(loop_name), "cannot reserve in the budgets", |c| {
            c.query_one(
                "SELECT refused, spent, reserved, dead_ticks, dead_amounts
                 FROM budget_reserve($1, $2, $3, $4, $5, $6, $7, $8)",
                &[&loop_name, &tick, &amount, &force, &names, &starts, &ends, &caps],
            )
        })?;
        let refused: i32 = row.get(0);
        let dead_ticks: Vec<i64> = row.get(3);
        let dead_amounts: Vec<f64> = row.get(4);
        Ok(RawReserve {
            refused: usize::try_from(refused).ok().filter(|i| *i > 0).map(|i| i - 1),
            spent: row.get(1),
            reserved: row.get(2),
            dead: dead_ticks
                .into_iter()
                .map(|t| u64::try_from(t).unwrap_or(0))
                .zip(dead_amounts)
                .collect(),
        })
    }

    fn settle(&self, loop_name: &str, tick: u64, costs: &[(String, f64)]) -> Result<Vec<RawSettled>> {
        let names: Vec<String> = costs.iter().map(|c| c.0.clone()).collect();
        let values: Vec<f64> = costs.iter().map(|c| c.1).collect();
        let tick = i64::try_from(tick).unwrap_or(i64::MAX);
        let rows = self.with(Some(loop_name), "cannot settle in the budgets", |c| {
            c.query(
                "SELECT account, amount, before, after FROM budget_settle($1, $2, $3, $4)",
                &[&loop_name, &tick, &names, &values],
            )
        })?;
        Ok(rows
            .iter()
            .map(|r| RawSettled {
                account: r.get(0),
                amount: r.get(1),
                before: r.get(2),
                after: r.get(3),
            })
            .collect())
    }

    fn release(&self, loop_name: &str, tick: u64) -> Result<()> {
        let tick = i64::try_from(tick).unwrap_or(i64::MAX);
        self.with(Some(loop_name), "cannot release a reservation", |c| {
            c.execute(
                "DELETE FROM budget_holds WHERE loop = $1 AND tick = $2",
                &[&loop_name, &tick],
            )
        })?;
        Ok(())
    }

    fn read(&self, accounts: &[String]) -> Result<Ledger> {
        let accounts = accounts.to_vec();
        let (rows, holds) = self.with(None, "cannot read the budgets", |c| {
            let rows = c.query(
                "SELECT account, window_start_ms, window_end_ms, spent FROM budget_accounts WHERE account = ANY ($1)",
                &[&accounts],
            )?;
            let holds = c.query(
                "SELECT loop, tick, amount, at::text, accounts, starts FROM budget_holds WHERE accounts && $1",
                &[&accounts],
            )?;
            Ok((rows, holds))
        })?;
        let mut ledger = Ledger::default();
        for r in rows {
            ledger.accounts.insert(
                r.get(0),
                Account {
                    window_start_ms: r.get(1),
                    window_end_ms: r.get(2),
                    spent: r.get(3),
                },
            );
        }
        for h in holds {
            let accounts: Vec<String> = h.get(4);
            let starts: Vec<i64> = h.get(5);
            ledger.holds.push(Hold {
                loop_name: h.get(0),
                tick: u64::try_from(h.get::<_, i64>(1)).unwrap_or(0),
                amount: h.get(2),
                at: crate::clock::now(),
                accounts: accounts.into_iter().zip(starts).collect(),
            });
        }
        Ok(ledger)
    }

    fn reset(&self, accounts: &[String]) -> Result<BTreeMap<String, f64>> {
        let accounts = accounts.to_vec();
        let rows = self.with(None, "cannot reset the budgets", |c| {
            c.query(
                "UPDATE budget_accounts b SET spent = 0 FROM budget_accounts o
                 WHERE b.account = o.account AND b.account = ANY ($1) AND o.spent <> 0
                 RETURNING b.account, o.spent",
                &[&accounts],
            )
        })?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}
