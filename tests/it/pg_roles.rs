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

/// A second host's root on the same store: its own directory and
/// automaton.toml (`toml`), the suite's user a delegate there as here.
struct Host {
    root: tempfile::TempDir,
}

impl Host {
    fn new(toml: &str) -> Host {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("loops")).unwrap();
        std::fs::create_dir_all(root.path().join("cache")).unwrap();
        let text = format!("delegates = [{:?}]\n{toml}", automaton::who::os_user());
        std::fs::write(root.path().join("automaton.toml"), text).unwrap();
        Host { root }
    }

    /// `automaton ARGS` on this host, connecting as `url`, for `who`.
    fn run(&self, url: &str, who: &str, args: &[&str]) -> std::process::Output {
        let mut c = std::process::Command::new(crate::common::BIN);
        c.arg("--root").arg(self.root.path());
        crate::common::isolate(&mut c);
        c.env("AUTOMATON_STORE", url)
            .env("AUTOMATON_USER", who)
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .args(args)
            .output()
            .unwrap()
    }

    fn config_file(&self) -> String {
        self.root.path().join("automaton.toml").display().to_string()
    }
}

#[test]
fn the_root_wide_access_is_the_stores_and_a_runner_hosts_file_grants_nothing() {
    let Some(env) = Env::postgres() else { return };
    env.new_loop("demo", "step = \"true\"\n");
    let pg = env.pg.as_ref().unwrap();
    let os = automaton::who::os_user();
    // The admin's host names the approvers, and records them for every host.
    env.root_config(&format!(
        "delegates = [{os:?}]\n[access]\napprovers = [\"ann\"]\n"
    ));
    // Until it is recorded, each host reads its own file, and says so.
    let out = env.run(&["access", "show"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("its [access] is not recorded in the store, so each host reads its own file"),
        "{err}"
    );
    let said = env.ok(&["access", "import"]);
    assert!(said.starts_with("root-wide access recorded in "), "{said}");
    assert!(said.contains("approvers: ann; operators: anyone"), "{said}");
    assert!(env.ok(&["access", "import"]).contains("nothing recorded"));
    let log = env.ok(&["user", "log"]);
    assert!(
        log.contains("recorded the root-wide access (approvers: ann; operators: anyone; viewers: anyone)"),
        "{log}"
    );

    // A runner host whose own file makes its user an approver.
    let runner = Host::new("[access]\napprovers = [\"mallory\"]\n");
    let out = runner.run(&pg.url, "mallory", &["approve", "demo", "--ahead"]);
    assert_eq!(
        out.status.code(),
        Some(10),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{}: its [access] (approvers: mallory",
            runner.config_file()
        )) && err.contains("is ignored"),
        "{err}"
    );
    assert!(err.contains("ann"), "the refusal names who may: {err}");
    assert_eq!(approvals(&env), vec![], "nothing was given");
    let shown: serde_json::Value = serde_json::from_slice(
        &runner
            .run(&pg.url, "mallory", &["access", "show", "--json"])
            .stdout,
    )
    .unwrap();
    assert_eq!(shown["from"], "store");
    assert_eq!(shown["access"]["approvers"], serde_json::json!(["ann"]));
    assert_eq!(shown["config"]["approvers"], serde_json::json!(["mallory"]));

    // The approver the store names still approves, from the runner host too.
    let out = runner.run(&pg.url, "ann", &["approve", "demo", "--ahead"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(approvals(&env).len(), 1);

    // With `attribution` set, the runner's role cannot record its own file
    // as the root's access, even with a grant to write the admin record.
    let roles = Roles::new(pg, &crate::common::test_store().unwrap());
    pg.client()
        .batch_execute(&format!(
            "GRANT INSERT, UPDATE, DELETE ON admin_log TO {0}; GRANT USAGE ON SEQUENCE admin_log_n_seq TO {0}",
            roles.runner()
        ))
        .unwrap();
    let as_runner = as_role(&pg.url, roles.runner());
    let out = runner.run(&as_runner, "mallory", &["access", "import"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "role {} may not change the root-wide access",
            roles.runner()
        )),
        "{err}"
    );
    let mut c = postgres::Client::connect(&as_runner, postgres::NoTls).unwrap();
    let wrote = c.execute("DELETE FROM admin_log WHERE kind = 'access-set'", &[]);
    assert_eq!(
        wrote.map_err(|e| e.code().cloned()).unwrap_err(),
        Some(postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
    );
    let shown: serde_json::Value = serde_json::from_str(&env.ok(&["access", "show", "--json"])).unwrap();
    assert_eq!(
        shown["access"]["approvers"],
        serde_json::json!(["ann"]),
        "as recorded"
    );
}

#[test]
fn a_runner_role_cannot_end_an_await_or_resume_by_writing_state_and_its_ticks_still_commit() {
    let Some(env) = Env::postgres() else { return };
    env.new_loop(
        "demo",
        "step = \"true\"\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    );
    let pg = env.pg.as_ref().unwrap();
    let roles = Roles::new(pg, &crate::common::test_store().unwrap());
    let runner = as_role(&pg.url, roles.runner());
    let alice = as_role(&pg.url, roles.alice());
    let run = |url: &str, who: &str, args: &[&str]| {
        env.cmd()
            .env("AUTOMATON_STORE", url)
            .env("AUTOMATON_USER", who)
            .args(args)
            .output()
            .unwrap()
    };
    let ok = |out: std::process::Output| {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };

    // The runner's ticks commit: one that runs, one that opens an await.
    ok(run(&runner, "operator", &["tick", "demo"]));
    let waits = ok(run(&runner, "operator", &["tick", "demo"]));
    assert!(waits.starts_with("demo tick 2: awaiting-approval"), "{waits}");
    assert_eq!(env.state("demo")["status"], "awaiting_approval");

    // Straight into the table: the await cleared, the loop made active.
    let mut c = postgres::Client::connect(&runner, postgres::NoTls).unwrap();
    let refused = |e: postgres::Error| {
        let message = e.as_db_error().map(|d| d.message().to_owned());
        (e.code().cloned(), message.unwrap_or_default())
    };
    let cleared = c.execute(
        "UPDATE loops SET state = (state::jsonb || '{\"awaiting\": null, \"status\": \"active\"}'::jsonb)::json
         WHERE name = 'demo'",
        &[],
    );
    let (code, message) = cleared.map_err(refused).unwrap_err();
    assert_eq!(code, Some(postgres::error::SqlState::INSUFFICIENT_PRIVILEGE));
    assert!(
        message.contains(&format!("role {} may not end await", roles.runner())),
        "{message}"
    );
    assert_eq!(env.state("demo")["status"], "awaiting_approval");
    assert!(env.state("demo")["awaiting"].is_object(), "the await is open");
    let ran = ok(run(&runner, "operator", &["tick", "demo"]));
    assert!(
        ran.starts_with("demo tick 2: awaiting-approval"),
        "still waits: {ran}"
    );

    // An approver's approval releases it, at the runner's next tick.
    ok(run(&alice, roles.alice(), &["approve", "demo"]));
    let ran = ok(run(&runner, "operator", &["tick", "demo"]));
    assert!(ran.starts_with("demo tick 2: ran "), "{ran}");
    assert_eq!(env.state("demo")["tick"], 2);
    assert!(env.state("demo")["awaiting"].is_null());

    // The runner may stop a loop, not start it again.
    ok(run(&runner, "operator", &["pause", "demo"]));
    let out = run(&runner, "operator", &["resume", "demo"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "role {} may not make loop demo active (it is paused)",
            roles.runner()
        )),
        "{err}"
    );
    let wrote = c.execute(
        "UPDATE loops SET state = (state::jsonb || '{\"status\": \"active\"}'::jsonb)::json WHERE name = 'demo'",
        &[],
    );
    assert_eq!(
        wrote.map_err(refused).unwrap_err().0,
        Some(postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
    );
    assert_eq!(env.state("demo")["status"], "paused");
    ok(run(&alice, roles.alice(), &["resume", "demo"]));
    assert_eq!(env.state("demo")["status"], "active");
}

/// A change of the rules while an await is open replaces that await by
/// one for the change: the loop still waits, and the runner's tick that
/// records it commits.
#[test]
fn a_runner_roles_tick_replaces_an_open_await_by_one_for_a_change_of_the_rules() {
    let Some(env) = Env::postgres() else { return };
    env.new_loop(
        "demo",
        "step = \"true\"\n[approval]\nconfig_changes = \"await\"\n\
         [[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    );
    let pg = env.pg.as_ref().unwrap();
    let roles = Roles::new(pg, &crate::common::test_store().unwrap());
    let runner = as_role(&pg.url, roles.runner());
    let tick = || {
        let out = env
            .cmd()
            .env("AUTOMATON_STORE", &runner)
            .args(["tick", "demo"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    tick();
    assert!(tick().starts_with("demo tick 2: awaiting-approval"));
    let gate_await = env.state("demo")["awaiting"]["id"].clone();
    // The rules changed by the tables' owner (an approver).
    pg.client()
        .batch_execute("UPDATE loops SET config = replace(config, 'every = 1', 'every = 3')")
        .unwrap();
    let said = tick();
    assert!(said.contains("a change to the rules needs an approval"), "{said}");
    let state = env.state("demo");
    assert_eq!(state["status"], "awaiting_approval");
    assert_ne!(state["awaiting"]["id"], gate_await, "{state}");
    assert_eq!(state["awaiting"]["gates"][0]["gate"], "loop.toml", "{state}");
}

/// With `required = 2`, one approval used does not end the await for a
/// runner role; two people's, used by its tick, do.
#[test]
fn a_runner_role_cannot_end_an_await_with_fewer_approvals_than_required() {
    let Some(env) = Env::postgres() else { return };
    env.new_loop(
        "demo",
        "step = \"true\"\n[approval]\nrequired = 2\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n",
    );
    let pg = env.pg.as_ref().unwrap();
    let roles = Roles::new(pg, &crate::common::test_store().unwrap());
    let runner = as_role(&pg.url, roles.runner());
    let run = |url: &str, who: &str, args: &[&str]| {
        let out = env
            .cmd()
            .env("AUTOMATON_STORE", url)
            .env("AUTOMATON_USER", who)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    run(&runner, "operator", &["tick", "demo"]);
    run(&runner, "operator", &["tick", "demo"]);
    run(
        &as_role(&pg.url, roles.alice()),
        roles.alice(),
        &["approve", "demo"],
    );
    let mut c = postgres::Client::connect(&runner, postgres::NoTls).unwrap();
    let used = c.execute(
        "UPDATE loops SET state = (state::jsonb
             || '{\"awaiting\": null, \"status\": \"active\", \"pending_approvals\": []}'::jsonb)::json
         WHERE name = 'demo'",
        &[],
    );
    let e = used.unwrap_err();
    let message = e
        .as_db_error()
        .map(|d| d.message().to_owned())
        .unwrap_or_default();
    assert!(
        message.contains("without its approvals (1 of 2 used)"),
        "{message}"
    );
    assert!(env.state("demo")["awaiting"].is_object());
    let waits = run(&runner, "operator", &["tick", "demo"]);
    assert!(waits.starts_with("demo tick 2: awaiting-approval"), "{waits}");

    // A second person (named by a role trusted to attest): the runner's
    // tick uses both, and runs.
    run(&as_role(&pg.url, roles.desk()), "bob", &["approve", "demo"]);
    let ran = run(&runner, "operator", &["tick", "demo"]);
    assert!(ran.starts_with("demo tick 2: ran "), "{ran}");
    assert!(env.state("demo")["awaiting"].is_null());
}
