//! Budgets: windows and scopes, a reservation before each step settled
//! with its cost after, and what a tick does when one does not fit.

use std::process::Stdio;

use crate::common::Env;

/// Adds `text` (`[[budget]]` tables) to the root's automaton.toml.
fn root_budgets(env: &Env, text: &str) {
    let file = env.root.join("automaton.toml");
    let mut kept = std::fs::read_to_string(&file).unwrap_or_default();
    kept += "\n";
    kept += text;
    std::fs::write(&file, kept).unwrap();
}

fn budgets(env: &Env) -> Vec<serde_json::Value> {
    let out: serde_json::Value = serde_json::from_str(&env.ok(&["budget", "--json"])).unwrap();
    out["budgets"].as_array().unwrap().clone()
}

fn ledger(env: &Env) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(env.root.join("budgets/ledger.json")).unwrap()).unwrap()
}

fn of_kind(env: &Env, name: &str, kind: &str) -> Vec<serde_json::Value> {
    env.history(name)
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

const SPEND_ONE: &str = "step = \"echo cost_usd=1 > \\\"$AUTOMATON_METRICS\\\"\"\nmax_per_tick = 1.0\n";

/// 12 loops of one group tick at once, twice over, into one daily budget
/// of 10: exactly 10 steps run, whatever the interleaving; the rest skip
/// naming the budget; nothing stays reserved; a loop outside the group
/// is not counted.
#[test]
fn many_loops_ticking_at_once_spend_no_more_than_their_daily_cap() {
    let env = Env::new();
    root_budgets(
        &env,
        "[[budget]]\nname = \"team-daily\"\nwindow = \"1d\"\ntz = \"Europe/Berlin\"\ncap = 10.0\n\
         scope = \"group:agents\"\nwarn_at = 0.8\non_cap = \"skip\"\n",
    );
    let names: Vec<String> = (0..12).map(|i| format!("agent-{i}")).collect();
    for name in &names {
        env.new_loop(name, &format!("group = \"agents\"\n{SPEND_ONE}"));
    }
    env.new_loop("outsider", SPEND_ONE);
    for _ in 0..2 {
        let children: Vec<_> = names
            .iter()
            .map(|n| {
                env.cmd()
                    .args(["tick", n])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut c in children {
            assert!(c.wait().unwrap().success());
        }
    }
    env.ok(&["tick", "outsider"]);
    let mut ran = 0;
    let mut skipped = 0;
    let mut settled = 0.0;
    let mut warnings = 0;
    for name in &names {
        for e in env.history(name) {
            match e["kind"].as_str().unwrap() {
                "tick" if e["outcome"] == "ran" => ran += 1,
                "tick" if e["outcome"] == "skipped" => {
                    skipped += 1;
                    let reason = e["reason"].as_str().unwrap();
                    assert!(reason.starts_with("budget team-daily (1d window to "), "{reason}");
                    assert!(reason.contains("of cost_usd 10.00"), "{reason}");
                }
                "budget-settled" => settled += e["costs"]["team-daily"].as_f64().unwrap(),
                "budget-warning" => warnings += 1,
                _ => {}
            }
        }
    }
    assert_eq!((ran, skipped), (10, 14));
    assert!((settled - 10.0).abs() < 1e-9, "{settled}");
    assert_eq!(warnings, 1, "the share of 0.8 is passed once");
    let all = budgets(&env);
    assert_eq!(all.len(), 1, "{all:?}");
    let b = &all[0];
    assert_eq!(
        (b["name"].as_str(), b["spent"].as_f64(), b["reserved"].as_f64()),
        (Some("team-daily"), Some(10.0), Some(0.0))
    );
    assert_eq!(b["loops"].as_array().unwrap().len(), 12);
    assert!(b["window_end_ms"].as_i64().unwrap() > b["window_start_ms"].as_i64().unwrap());
    if env.pg.is_none() {
        assert_eq!(ledger(&env)["holds"], serde_json::json!([]));
    }
    // status and list show the spend of the budgets a loop belongs to.
    let status = env.status("agent-0");
    assert_eq!(status["budgets"][0]["name"], "team-daily");
    assert_eq!(status["budgets"][0]["spent"], 10.0);
    assert_eq!(status["budgets"][0]["cap"], 10.0);
    assert!(env.status("outsider").get("budgets").is_none());
    let text = env.ok(&["status", "agent-0"]);
    assert!(
        text.contains("team-daily (1d): spent 10.00 and reserved 0.00 of cost_usd 10.00, window ends "),
        "{text}"
    );
    let list: serde_json::Value = serde_json::from_str(&env.ok(&["list", "--json"])).unwrap();
    let listed = list
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "agent-3")
        .unwrap();
    assert_eq!(listed["budgets"][0]["reserved"], 0.0);
    // One read of the ledger serves the whole listing, each loop its own.
    for l in list.as_array().unwrap() {
        if l["name"] == "outsider" {
            assert!(l.get("budgets").is_none(), "{l}");
        } else {
            assert_eq!(l["budgets"][0]["name"], "team-daily", "{l}");
            assert_eq!(l["budgets"][0]["spent"], 10.0, "{l}");
        }
    }
    assert!(of_kind(&env, "outsider", "budget-reserved").is_empty());
}

/// `on_cap = "await"`: the loop waits for a person, the reason naming the
/// budget; an approval spends past the cap; and once the window has
/// passed the loop runs again by itself.
#[test]
fn a_loop_awaiting_its_cap_runs_on_approval_and_in_the_next_window() {
    let env = crate::files_only!("it edits the ledger file as if the hour had passed");
    env.new_loop(
        "spender",
        &format!(
            "{SPEND_ONE}[[budget]]\nname = \"hourly\"\nwindow = \"1h\"\ncap = 1.0\non_cap = \"await\"\n"
        ),
    );
    env.ok(&["tick", "spender"]);
    env.ok(&["tick", "spender"]);
    let state = env.state("spender");
    assert_eq!(state["status"], "awaiting_approval");
    let reason = state["status_reason"].as_str().unwrap();
    assert!(reason.starts_with("budget hourly (1h window to "), "{reason}");
    assert!(
        reason.contains("spent 1.00 and reserved 0.00 of cost_usd 1.00; this tick's 1.00 does not fit"),
        "{reason}"
    );
    let capped = of_kind(&env, "spender", "budget-capped");
    assert_eq!(capped.len(), 1);
    assert_eq!(capped[0]["on_cap"], "await");
    // Still awaiting: a repeat records nothing new.
    env.ok(&["tick", "spender"]);
    assert_eq!(of_kind(&env, "spender", "budget-capped").len(), 1);

    // A person approves: the step runs past the cap, said so.
    env.ok(&["approve", "spender"]);
    env.ok(&["tick", "spender"]);
    assert_eq!(env.state("spender")["status"], "active");
    let reserved = of_kind(&env, "spender", "budget-reserved");
    assert_eq!(reserved.last().unwrap()["approved"], true);
    assert_eq!(budgets(&env)[0]["spent"], 2.0);

    env.ok(&["tick", "spender"]);
    assert_eq!(env.state("spender")["status"], "awaiting_approval");
    // The hour passes: the ledger's window is an earlier one.
    let file = env.root.join("budgets/ledger.json");
    let mut l = ledger(&env);
    let acct = &mut l["accounts"]["spender:hourly"];
    let (start, end) = (
        acct["window_start_ms"].as_i64().unwrap(),
        acct["window_end_ms"].as_i64().unwrap(),
    );
    acct["window_start_ms"] = (start - 3_600_000).into();
    acct["window_end_ms"] = (end - 3_600_000).into();
    std::fs::write(&file, serde_json::to_vec(&l).unwrap()).unwrap();
    env.ok(&["tick", "spender"]);
    assert_eq!(env.state("spender")["status"], "active");
    assert_eq!(budgets(&env)[0]["spent"], 1.0);
}

/// `on_cap = "halt"` halts with exit 7 and the budget named;
/// `resume --reset-budget` says what it reset and the loop spends again.
#[test]
fn a_halt_on_the_cap_is_resumed_with_its_budget_reset() {
    let env = Env::new();
    env.new_loop(
        "spender",
        &format!("{SPEND_ONE}[[budget]]\nname = \"daily\"\nwindow = \"1d\"\ncap = 1.5\n"),
    );
    env.ok(&["tick", "spender"]);
    env.fails(7, &["tick", "spender"]);
    let state = env.state("spender");
    assert_eq!(state["status"], "halted");
    assert!(
        state["status_reason"]
            .as_str()
            .unwrap()
            .starts_with("budget daily (1d window to ")
    );
    let said = env.ok(&["resume", "spender", "--reset-budget"]);
    assert!(
        said.contains("its budgets' spend starts over (was daily=1)"),
        "{said}"
    );
    let reset = of_kind(&env, "spender", "budget-reset");
    assert_eq!(reset[0]["budgets"]["daily"], 1.0);
    env.ok(&["tick", "spender"]);
    assert_eq!(env.state("spender")["status"], "active");
    assert_eq!(budgets(&env)[0]["spent"], 1.0);
}

/// A step that reports no cost counts at its reservation, unless the
/// loop says `unreported = "zero"`; a cost reported counts as reported.
#[test]
fn a_step_that_reports_nothing_counts_at_its_reservation() {
    let env = Env::new();
    root_budgets(
        &env,
        "[[budget]]\nname = \"per-loop\"\nwindow = \"month\"\ncap = 100.0\n",
    );
    env.new_loop("silent", "step = \"true\"\nmax_per_tick = 2.5\n");
    env.new_loop(
        "trusted",
        "step = \"true\"\nmax_per_tick = 2.5\nunreported = \"zero\"\n",
    );
    env.new_loop(
        "honest",
        "step = \"echo cost_usd=0.25 > \\\"$AUTOMATON_METRICS\\\"\"\nmax_per_tick = 2.5\n",
    );
    for name in ["silent", "trusted", "honest"] {
        env.ok(&["tick", name]);
    }
    let spent: std::collections::BTreeMap<String, serde_json::Value> = budgets(&env)
        .iter()
        .map(|b| (b["account"].as_str().unwrap().to_owned(), b["spent"].clone()))
        .collect();
    assert_eq!(spent["per-loop@silent"], 2.5);
    assert_eq!(spent["per-loop@trusted"], 0.0);
    assert_eq!(spent["per-loop@honest"], 0.25);
}

/// A tick killed while its step runs keeps its reservation held; the
/// loop's next tick settles it at the reservation (the step may have
/// spent it) before reserving its own.
#[test]
fn a_dead_ticks_reservation_stays_counted_until_the_next_tick() {
    let env = Env::new();
    let mark = env.scratch().join("started");
    env.new_loop(
        "spender",
        &format!(
            "step = \"if [ ! -e {m} ]; then touch {m}; sleep 60; fi\"\nmax_per_tick = 3.0\n\
             [[budget]]\nname = \"daily\"\nwindow = \"1d\"\ncap = 10.0\n",
            m = mark.display()
        ),
    );
    let mut tick = env
        .cmd()
        .args(["tick", "spender"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    crate::common::wait_for(&mark);
    let held = budgets(&env);
    assert_eq!(
        (held[0]["spent"].as_f64(), held[0]["reserved"].as_f64()),
        (Some(0.0), Some(3.0))
    );
    tick.kill().unwrap();
    tick.wait().unwrap();
    // The step's group dies with its tick's; the ledger still holds it.
    assert_eq!(budgets(&env)[0]["reserved"], 3.0);
    env.ok(&["tick", "spender"]);
    let settled = of_kind(&env, "spender", "budget-settled");
    assert_eq!(settled.len(), 2, "{settled:?}");
    assert_eq!(
        (settled[0]["tick"].as_u64(), settled[0]["died"].as_bool()),
        (Some(1), Some(true))
    );
    let b = &budgets(&env)[0];
    assert_eq!(
        (b["spent"].as_f64(), b["reserved"].as_f64()),
        (Some(6.0), Some(0.0))
    );
}

/// A budget that cannot be read is an error naming the file, the line and
/// what is wrong.
#[test]
fn a_bad_budget_is_refused_with_its_file_and_line() {
    let env = Env::new();
    let file = env.root.join("bad.toml");
    std::fs::write(
        &file,
        "step = \"true\"\n[[budget]]\nname = \"x\"\nwindow = \"fortnightly\"\ncap = 1.0\n",
    )
    .unwrap();
    let err = env.fails(5, &["new", "bad", "--from", file.to_str().unwrap()]);
    assert!(
        err.contains("bad.toml:4") && err.contains("window \"fortnightly\""),
        "{err}"
    );
    std::fs::write(
        &file,
        "step = \"true\"\n[[budget]]\nname = \"x\"\nwindow = \"1d\"\ncap = 1.0\nscope = \"root\"\n",
    )
    .unwrap();
    let err = env.fails(5, &["new", "bad", "--from", file.to_str().unwrap()]);
    assert!(
        err.contains("bad.toml:6") && err.contains("the loop's own"),
        "{err}"
    );
}

/// A step that writes Claude Code's JSON result as its metrics file is
/// counted at its `total_cost_usd`, its usage kept as token metrics.
#[test]
fn claude_codes_json_result_is_read_for_its_cost() {
    let env = Env::new();
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/claude/result.json");
    env.new_loop(
        "agent",
        &format!(
            "step = \"cat {fixture} > \\\"$AUTOMATON_METRICS\\\"\"\nmax_per_tick = 2.0\n\
             [[budget]]\nname = \"daily\"\nwindow = \"1d\"\ncap = 10.0\n"
        ),
    );
    env.ok(&["tick", "agent"]);
    let state = env.state("agent");
    assert_eq!(state["metrics"]["cost_usd"], 0.412_765_5);
    assert_eq!(state["metrics"]["output_tokens"], 3921.0);
    assert_eq!(state["metrics"]["tokens"], 23.0 + 18734.0 + 241_507.0 + 3921.0);
    assert_eq!(state["metrics"]["num_turns"], 7.0);
    assert_eq!(budgets(&env)[0]["spent"], 0.412_765_5);

    // Claude Code's own output, recorded: an error that spent nothing is
    // settled at 0, not counted at the tick's reservation of 2.
    let recorded = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/claude/not-logged-in.json"
    );
    env.new_loop(
        "unlogged",
        &format!(
            "step = \"cat {recorded} > \\\"$AUTOMATON_METRICS\\\"\"\nmax_per_tick = 2.0\n\
             [[budget]]\nname = \"daily\"\nwindow = \"1d\"\ncap = 10.0\n"
        ),
    );
    env.ok(&["tick", "unlogged"]);
    let listed = budgets(&env);
    let unlogged = listed
        .iter()
        .find(|b| b["loops"].to_string().contains("unlogged"))
        .unwrap_or_else(|| panic!("{listed:?}"));
    assert_eq!(unlogged["spent"], 0.0, "{listed:?}");
    assert_eq!(unlogged["reserved"], 0.0, "{listed:?}");
}

/// A step that reports tokens but no cost is priced by the root's
/// `[pricing]` table for the budget's metric.
#[test]
fn tokens_are_priced_by_the_roots_pricing_table() {
    let env = Env::new();
    root_budgets(
        &env,
        "[pricing.cost_usd]\ninput_tokens = 0.000003\noutput_tokens = 0.000015\n\n\
         [[budget]]\nname = \"team\"\nwindow = \"7d\"\ncap = 5.0\nscope = \"root\"\n",
    );
    env.new_loop(
        "agent",
        "step = \"printf 'input_tokens=100000\\\\noutput_tokens=20000\\\\n' > \\\"$AUTOMATON_METRICS\\\"\"\nmax_per_tick = 2.0\n",
    );
    env.ok(&["tick", "agent"]);
    let spent = budgets(&env)[0]["spent"].as_f64().unwrap();
    assert!((spent - 0.6).abs() < 1e-9, "{spent}");
}

/// Three daemons, as three hosts, on one PostgreSQL root: 100 loops
/// firing every 200ms, all spending into one daily budget of 20. Every
/// reservation is checked and held in one statement on the server: exactly
/// 20 steps run, whichever host ran them, and the budget ends at its cap
/// with nothing reserved; every settlement is in history.
#[test]
fn daemons_on_three_hosts_spend_no_more_than_one_shared_budget() {
    let Some(env) = Env::postgres() else { return };
    const LOOPS: usize = 100;
    let budget = "\n[[budget]]\nname = \"team-daily\"\nwindow = \"1d\"\ntz = \"Europe/Berlin\"\ncap = 20.0\n\
                  scope = \"group:agents\"\non_cap = \"skip\"\n";
    root_budgets(&env, budget);
    let names: Vec<String> = (0..LOOPS).map(|i| format!("agent-{i}")).collect();
    for name in &names {
        env.new_often_loop(
            name,
            &format!("group = \"agents\"\n{SPEND_ONE}[schedule]\nevery = \"200ms\"\n"),
        );
    }
    let url = env.pg.as_ref().unwrap().url.clone();
    let mut daemons: Vec<std::process::Child> = ["host-a", "host-b", "host-c"]
        .iter()
        .map(|host| {
            let root = env.root.with_file_name(format!("root-{host}"));
            let cmd = |root: &std::path::Path| {
                let mut c = std::process::Command::new(crate::common::BIN);
                crate::common::isolate(&mut c)
                    .arg("--root")
                    .arg(root)
                    .env("AUTOMATON_STORE", &url)
                    .env("AUTOMATON_HOST", host)
                    .env("AUTOMATON_MIN_EVERY", "100ms")
                    .env("NO_COLOR", "1")
                    .stdin(Stdio::null());
                c
            };
            assert!(cmd(&root).arg("init").output().unwrap().status.success());
            let file = root.join("automaton.toml");
            let text = std::fs::read_to_string(&file).unwrap_or_default() + budget;
            std::fs::write(&file, text).unwrap();
            cmd(&root)
                .arg("daemon")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let capped = |env: &Env| -> usize { names.iter().map(|n| of_kind(env, n, "budget-capped").len()).sum() };
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(2);
    while capped(&env) < LOOPS {
        assert!(
            std::time::Instant::now() < deadline,
            "the loops never met their cap"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    for d in &mut daemons {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(d.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        d.wait().unwrap();
    }
    let (mut ran, mut settled, mut hosts) = (0, 0.0, std::collections::BTreeSet::new());
    for name in &names {
        for e in env.history(name) {
            match e["kind"].as_str().unwrap() {
                "tick" if e["outcome"] == "ran" => {
                    ran += 1;
                    hosts.insert(e["host"].as_str().unwrap().to_owned());
                }
                "budget-settled" => settled += e["costs"]["team-daily"].as_f64().unwrap(),
                _ => {}
            }
        }
    }
    assert_eq!(ran, 20);
    assert!((settled - 20.0).abs() < 1e-9, "{settled}");
    let b = &budgets(&env)[0];
    assert_eq!(
        (b["spent"].as_f64(), b["reserved"].as_f64()),
        (Some(20.0), Some(0.0))
    );
    assert!(hosts.len() > 1, "one host ran every step: {hosts:?}");
}

/// A gate's context carries the budgets its loop belongs to, where each
/// stood when the gate ran: spent, reserved, cap and the window's end.
#[test]
fn a_gate_sees_its_loops_budgets_as_they_stand() {
    let env = Env::new();
    env.new_loop(
        "seen",
        &format!(
            "{SPEND_ONE}[[budget]]\nname = \"daily\"\nwindow = \"1d\"\ncap = 10.0\n\
             [[gate]]\nstock = \"max-ticks\"\nparams = {{ max = 100 }}\n"
        ),
    );
    env.ok(&["tick", "seen"]);
    env.ok(&["tick", "seen"]);
    let contexts: Vec<serde_json::Value> = of_kind(&env, "seen", "gate")
        .into_iter()
        .map(|e| e["context"].clone())
        .collect();
    assert_eq!(contexts.len(), 2, "{contexts:?}");
    let first = &contexts[0]["budgets"][0];
    assert_eq!(first["name"], "daily", "{first}");
    assert_eq!(first["spent"], 0.0, "{first}");
    assert_eq!(first["cap"], 10.0, "{first}");
    assert!(first["window_end_ms"].as_i64().unwrap() > 0, "{first}");
    // The second tick's gate sees what the first one's step spent.
    assert_eq!(contexts[1]["budgets"][0]["spent"], 1.0, "{}", contexts[1]);
}
