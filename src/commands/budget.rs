//! `budget`: every budget of the root and its loops, its current window,
//! what it has spent and holds reserved against its cap, and its loops.

use std::collections::BTreeMap;
use std::io::Write;

use serde::Serialize;

use crate::budget::{Member, Standing};
use crate::cli::BudgetArgs;
use crate::error::{Exit, Result};
use crate::root::Root;
use crate::store::Stores;

/// One budget's account, with the loops that count in it.
#[derive(Serialize)]
struct Row {
    #[serde(flatten)]
    standing: Standing,
    loops: Vec<String>,
}

#[derive(Serialize)]
struct View {
    budgets: Vec<Row>,
}

pub(super) fn run(root: &Root, stores: &Stores, args: &BudgetArgs, out: &mut dyn Write) -> Result<Exit> {
    let mut accounts: BTreeMap<String, (Member, Vec<String>)> = BTreeMap::new();
    // The root's shared budgets, whether a loop counts in them yet or not.
    for b in &root.settings().budgets {
        if b.scope != crate::budget::Scope::Loop {
            let m = Member {
                account: b.name.clone(),
                spec: b.clone(),
            };
            accounts.insert(m.account.clone(), (m, Vec::new()));
        }
    }
    for dir in stores.list()? {
        let name = dir.name().to_string();
        let config = match dir.config() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("loop {name:?}: its budgets are not shown: {e}");
                continue;
            }
        };
        for m in crate::budget::of_loop(&root.settings().budgets, &name, &config) {
            accounts
                .entry(m.account.clone())
                .or_insert_with(|| (m.clone(), Vec::new()))
                .1
                .push(name.clone());
        }
    }
    let members: Vec<Member> = accounts.values().map(|(m, _)| m.clone()).collect();
    let standings = crate::budget::standings(
        crate::budget::Place::of(root.path(), stores.shared_ledger()),
        &members,
    )?;
    let view = View {
        budgets: standings
            .into_iter()
            .zip(accounts.into_values())
            .map(|(standing, (_, loops))| Row { standing, loops })
            .collect(),
    };
    if args.json.json {
        super::emit_json(out, &view)?;
        return Ok(Exit::Ok);
    }
    if view.budgets.is_empty() {
        super::emit(
            out,
            "no budgets: a [[budget]] table in automaton.toml or a loop.toml declares one\n",
        )?;
        return Ok(Exit::Ok);
    }
    let mut text = format!(
        "{:<24} {:<8} {:>10} {:>10} {:>10}  {:<26} {}\n",
        "BUDGET", "WINDOW", "SPENT", "RESERVED", "CAP", "WINDOW ENDS", "LOOPS"
    );
    for r in &view.budgets {
        let s = &r.standing;
        let ends = s
            .window_end_ms
            .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
            .map_or_else(|| "-".to_owned(), crate::clock::local);
        text += &format!(
            "{:<24} {:<8} {:>10.2} {:>10.2} {:>10.2}  {:<26} {}\n",
            s.account,
            s.window,
            s.spent,
            s.reserved,
            s.cap,
            ends,
            r.loops.join(",")
        );
    }
    super::emit(out, &text)?;
    Ok(Exit::Ok)
}
