//! Approvals and rule changes attributed by the server: with the store's
//! `attribution` set, a runner host's role cannot give an approval nor
//! change a loop's rules, whatever it writes; an approver's approval is by
//! the server's session user; a role trusted to attest may name the person.
//! Real roles (`CREATE ROLE ... LOGIN`) of the test server, connecting as
//! themselves.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::common::{Env, PgStore};

/// Roles made for one test, dropped (with their grants) when it ends.
struct Roles {
    base: String,
    names: Vec<String>,
}

impl Roles {
    fn new(pg: &PgStore, base: &str) -> Roles {
        static N: AtomicU32 = AtomicU32::new(0);
        let tag = format!("{}_{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst));
        let name = |role: &str| format!("automaton_{role}_{tag}");
        let names: Vec<String> = ["approvers", "attesters", "runner", "alice", "desk"]
            .into_iter()
            .map(name)
            .collect();
        let [approvers, attesters, runner, alice, desk] = names.as_slice() else {
            unreachable!()
        };
        let schema = &pg.schema;
        // The grants docs/postgres.md gives a runner host and an approver.
        let sql = format!(
            "CREATE ROLE {approvers};
             CREATE ROLE {attesters};
             CREATE ROLE {runner} LOGIN;
             CREATE ROLE {alice} LOGIN IN ROLE {approvers};
             CREATE ROLE {desk} LOGIN IN ROLE {approvers}, {attesters};
             GRANT USAGE ON SCHEMA {schema} TO {runner}, {approvers};
             GRANT SELECT, INSERT, UPDATE, DELETE
                 ON loops, events, holders, leases, firings, fires, refusals, budget_accounts, budget_holds
                 TO {runner}, {approvers};
             GRANT SELECT ON automaton_schema, users, admin_log, runs TO {runner}, {approvers};
             INSERT INTO attribution (approvers, attesters) VALUES ('{approvers}', '{attesters}');"
        );
        pg.client().batch_execute(&sql).unwrap();
        Roles {
            base: base.to_owned(),
            names,
        }
    }

    fn runner(&self) -> &str {
        &self.names[2]
    }

    fn alice(&self) -> &str {
        &self.names[3]
    }

    fn desk(&self) -> &str {
        &self.names[4]
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.base, postgres::NoTls) {
            for name in self.names.iter().rev() {
                let _ = c.batch_execute(&format!("DROP OWNED BY {name}; DROP ROLE {name}"));
            }
        }
    }
}

/// `url` connecting as `role` (no password: the test server trusts its
/// socket).
fn as_role(url: &str, role: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let host = rest[..end].rsplit_once('@').map_or(&rest[..end], |(_, h)| h);
    format!("{scheme}://{role}@{host}{}", &rest[end..])
}

fn approve(env: &Env, url: &str, who: &str) -> std::process::Output {
    env.cmd()
        .env("AUTOMATON_STORE", url)
        .env("AUTOMATON_USER", who)
        .args(["approve", "demo", "--ahead"])
        .output()
        .unwrap()
}

fn approvals(env: &Env) -> Vec<(String, String)> {
    env.state("demo")["pending_approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["id"].as_str().unwrap().to_owned(),
                a["by"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_runner_role_can_neither_approve_nor_change_the_rules_and_still_ticks() {
    let Some(env) = Env::postgres() else { return };
    env.new_loop("demo", "step = \"true\"\n");
    let pg = env.pg.as_ref().unwrap();
    let roles = Roles::new(pg, &crate::common::test_store().unwrap());
    let runner = as_role(&pg.url, roles.runner());

    // Through the CLI, as anyone.
    let out = approve(&env, &runner, roles.alice());
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("role {} may not approve", roles.runner())),
        "{err}"
    );
    assert_eq!(approvals(&env), vec![], "nothing was given");

    // Straight into the tables, with the runner's own credentials.
    let mut c = postgres::Client::connect(&runner, postgres::NoTls).unwrap();
    let forged = format!(
        r#"{{"pending_approvals":[{{"id":"ap-9","by":"{}","at":"2026-01-01T00:00:00Z"}}]}}"#,
        roles.alice()
    );
    let refused = |e: postgres::Error| e.code().cloned();
    let wrote = c.execute(
        "UPDATE loops SET state = (state::jsonb || $1::text::jsonb)::json WHERE name = 'demo'",
        &[&forged],
    );
    assert_eq!(
        wrote.map_err(refused).unwrap_err(),
        Some(postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
    );
    let event = format!(r#"{{"kind":"approved","by":"{}","id":"ap-9"}}"#, roles.alice());
    let wrote = c.execute(
        "INSERT INTO events (loop, v, n, at, event) VALUES ('demo', 99, 0, now(), $1::text::json)",
        &[&event],
    );
    assert_eq!(
        wrote.map_err(refused).unwrap_err(),
        Some(postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
    );
    let wrote = c.execute(
        "UPDATE loops SET config = config || E'\\n[approval]\\nrequired = 0\\n' WHERE name = 'demo'",
        &[],
    );
    assert_eq!(
        wrote.map_err(refused).unwrap_err(),
        Some(postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
    );
    // Nor can it stand a table of its own in for the store's rules, or
    // write them.
    c.batch_execute("CREATE TEMP TABLE attribution (approvers name, attesters name)")
        .unwrap();
    let wrote = c.execute(
        "UPDATE loops SET state = (state::jsonb || $1::text::jsonb)::json WHERE name = 'demo'",
        &[&forged],
    );
    assert!(wrote.is_err(), "a temporary table changes nothing");
    c.batch_execute("DROP TABLE pg_temp.attribution").unwrap();
    let wrote = c.execute(&format!("DELETE FROM {}.attribution", pg.schema), &[]);
    assert_eq!(
        wrote.map_err(refused).unwrap_err(),
        Some(postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
    );
    assert_eq!(approvals(&env), vec![]);
    assert!(!env.state("demo").to_string().contains("required"));
    let config: String = pg
        .client()
        .query_one("SELECT config FROM loops WHERE name = 'demo'", &[])
        .unwrap()
        .get(0);
    assert_eq!(config, "step = \"true\"\n", "the rules are as they were");

    // The runner's own work goes on: its ticks commit.
    let out = env
        .cmd()
        .env("AUTOMATON_STORE", &runner)
        .args(["tick", "demo"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(env.state("demo")["tick"], 1);
    // Its run is in the run ledger, which the server writes for it and it
    // may only read.
    let ran: i64 = pg
        .client()
        .query_one("SELECT count(*) FROM runs WHERE loop = 'demo' AND tick = 1", &[])
        .unwrap()
        .get(0);
    assert_eq!(ran, 1);
    let wrote = c.execute(
        "UPDATE runs SET sums = '{\"cost_usd\": 0}' WHERE loop = 'demo'",
        &[],
    );
    assert_eq!(
        wrote.map_err(refused).unwrap_err(),
        Some(postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
    );
}

#[test]
fn an_approval_is_by_the_servers_session_user_and_a_forged_name_is_refused() {
    let Some(env) = Env::postgres() else { return };
    env.new_loop("demo", "step = \"true\"\n");
    let pg = env.pg.as_ref().unwrap();
    let roles = Roles::new(pg, &crate::common::test_store().unwrap());
    let alice = as_role(&pg.url, roles.alice());

    let out = approve(&env, &alice, "bob");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("an approval by bob refused")
            && err.contains(&format!("the server's session user is {}", roles.alice())),
        "{err}"
    );
    assert_eq!(approvals(&env), vec![]);

    let out = approve(&env, &alice, roles.alice());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let given = approvals(&env);
    assert_eq!(given.len(), 1);
    assert_eq!(given[0].1, roles.alice());
    let recorded: Vec<_> = env
        .history("demo")
        .into_iter()
        .filter(|e| e["kind"] == "approved")
        .collect();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0]["by"], roles.alice());
    assert_eq!(recorded[0]["actor"]["db_role"], roles.alice());

    // A role trusted to attest (the console, a delegate host) names the
    // person it acts for.
    let desk = as_role(&pg.url, roles.desk());
    let out = approve(&env, &desk, "bob");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let by: Vec<String> = approvals(&env).into_iter().map(|(_, by)| by).collect();
    assert_eq!(by, vec![roles.alice().to_owned(), "bob".to_owned()]);
}

#[test]
fn without_attribution_one_role_does_everything() {
    let Some(env) = Env::postgres() else { return };
    env.new_loop("demo", "step = \"true\"\n");
    let out = approve(&env, &env.pg.as_ref().unwrap().url, "bob");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(approvals(&env)[0].1, "bob");
    let rows: i64 = env
        .pg
        .as_ref()
        .unwrap()
        .client()
        .query_one("SELECT count(*) FROM attribution", &[])
        .unwrap()
        .get(0);
    assert_eq!(rows, 0, "attribution is off until an owner sets it");
}
