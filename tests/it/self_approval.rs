//! The agent cannot govern itself: each way a step was once seen to release
//! its own await, tried from inside a real step. The step of the loop's
//! first tick leaves a process behind (`setsid`, so the end of the step
//! does not end it) that waits until its loop awaits approval, then tries
//! its route and writes what happened into its run directory. Each route
//! must leave the loop awaiting, with no approval given, whatever the
//! route's own commands answered.

use std::path::PathBuf;

use crate::common::{BIN, Env, wait_for};
use crate::serve::Server;

/// The loop under attack: its one approver is `ann`, and its gate asks
/// for an approval before every tick but the first.
const LOOP: &str = "step = [\"sh\", \"SCRATCH/launch.sh\"]\n[access]\napprovers = [\"ann\"]\n[[gate]]\nstock = \"approve-every\"\nparams = { every = 1 }\n";

/// What a route's attack left: its log, once it is done.
struct Attack {
    log: String,
}

/// Runs `route` (shell, with `$A` the automaton command on this root and
/// `$URL` the console's address, when one serves) from the process the
/// step leaves behind, once the loop awaits approval.
fn attack(env: &Env, route: &str, url: Option<&str>) -> Attack {
    // The suite's user is no delegate here: commands act as the OS user,
    // and only `ann` may approve.
    env.root_config("");
    let scratch = env.scratch();
    let run_dir = env.loop_dir("agent").join("runs/1");
    std::fs::write(
        scratch.join("launch.sh"),
        // It waits for the attacker to be on its own: the step's end ends
        // its group.
        format!(
            "setsid sh '{}' \"$AUTOMATON_RUN_DIR\" </dev/null >/dev/null 2>&1 &\nwhile [ ! -e \"$AUTOMATON_RUN_DIR/attack.start\" ]; do sleep 0.01; done\n",
            scratch.join("attacker.sh").display()
        ),
    )
    .unwrap();
    std::fs::write(
        scratch.join("attacker.sh"),
        format!(
            "echo > \"$1/attack.start\"\nA=\"'{bin}' --root '{root}'\"\nURL='{url}'\nfor i in $(seq 400); do\n  grep -q 'awaiting_approval' \"$1/../../.state.loop\" 2>/dev/null && break\n  sleep 0.1\ndone\n{{\n{route}\n}} > \"$1/attack.log\" 2>&1\necho done > \"$1/attack.done\"\n",
            bin = BIN,
            root = env.root.display(),
            url = url.unwrap_or(""),
        ),
    )
    .unwrap();
    env.new_loop("agent", &LOOP.replace("SCRATCH", scratch.to_str().unwrap()));

    env.ok(&["tick", "agent"]);
    env.ok(&["tick", "agent"]);
    wait_for(&run_dir.join("attack.done"));

    Attack {
        log: std::fs::read_to_string(run_dir.join("attack.log")).unwrap_or_default(),
    }
}

/// The loop still awaits, nothing approved it, and the next tick still
/// waits for a person.
fn still_awaiting(env: &Env, attack: &Attack) {
    let state = env.state("agent");
    assert_eq!(
        state["status"], "awaiting_approval",
        "the attack said:\n{}",
        attack.log
    );
    assert!(
        state["pending_approvals"].as_array().is_none_or(Vec::is_empty),
        "an approval was given: {}\nthe attack said:\n{}",
        state["pending_approvals"],
        attack.log
    );
    assert!(
        !env.history_kinds("agent").iter().any(|k| k == "approved"),
        "the attack said:\n{}",
        attack.log
    );
    let out = env.ok(&["tick", "agent", "--json"]);
    assert!(
        out.contains("awaiting-approval"),
        "{out}\nthe attack said:\n{}",
        attack.log
    );
}

/// The token `user add` or `user rotate` printed, from the attack's log.
const TOKEN: &str = "tok=$(eval \"$A $VERB --json\" | sed -n 's/.*\"token\": *\"\\([^\"]*\\)\".*/\\1/p'); echo \"token: ${tok:-none}\"\n";

/// Approves through the console's API with the token in `$tok`.
const API_APPROVE: &str = "curl -s -o /dev/null -w 'api: %{http_code}\\n' -X POST -H \"Authorization: Bearer $tok\" -H 'Content-Type: application/json' -d '{}' \"$URL/api/loops/agent/approve\" || echo 'api: no connection'\n";

#[test]
fn a_step_cannot_make_a_console_user_for_an_approver_and_approve_with_its_token() {
    let env = Env::new();
    let server = Server::start(&env, &[]);
    let route = format!("VERB='user add ann'\n{TOKEN}{API_APPROVE}");
    let attack = attack(&env, &route, Some(&server.url("")));
    still_awaiting(&env, &attack);
    assert!(!env.ok(&["user", "list"]).contains("ann"), "{}", attack.log);
}

#[test]
fn a_step_cannot_rotate_an_approvers_token_and_approve_with_the_new_one() {
    let env = Env::new();
    let made: serde_json::Value = serde_json::from_str(&env.ok(&["user", "add", "ann", "--json"])).unwrap();
    let ann = made["token"].as_str().unwrap().to_owned();
    let server = Server::start(&env, &[]);
    let route = format!("VERB='user rotate ann'\n{TOKEN}{API_APPROVE}");
    let attack = attack(&env, &route, Some(&server.url("")));
    still_awaiting(&env, &attack);
    // The person's own token still works.
    let (code, _) = crate::serve::get(&server, "/api/loops", &ann);
    assert_eq!(
        code, 200,
        "ann's token stopped working; the attack said:\n{}",
        attack.log
    );
}

#[test]
fn a_step_cannot_make_itself_a_delegate_and_approve_as_the_approver() {
    let env = Env::new();
    let config = env.root.join("automaton.toml");
    let route = format!(
        "printf 'delegates = [\"%s\"]\\n' \"$(id -un)\" >> '{}'; echo \"append: $?\"\nAUTOMATON_USER=ann eval \"$A approve agent\"; echo \"approve: $?\"\n",
        config.display()
    );
    let attack = attack(&env, &route, None);
    let after = std::fs::read_to_string(&config).unwrap();
    assert!(
        !after.contains("delegates"),
        "{after}\nthe attack said:\n{}",
        attack.log
    );
    still_awaiting(&env, &attack);
}

#[test]
fn a_step_cannot_delete_its_own_gate() {
    // On PostgreSQL the config is the store's (a step reaches it only as
    // the store's other tables: docs/access.md).
    let env = crate::files_only!("the loop's config is a file of its directory");
    let loop_toml: PathBuf = env.loop_dir("agent").join("loop.toml");
    let route = format!(
        "sed -i '/^\\[\\[gate\\]\\]/,$d' '{0}'; echo \"sed: $?\"\n(: > '{0}'); echo \"truncate: $?\"\n",
        loop_toml.display()
    );
    let attack = attack(&env, &route, None);
    let text = std::fs::read_to_string(&loop_toml).unwrap();
    assert!(
        text.contains("approve-every"),
        "{text}\nthe attack said:\n{}",
        attack.log
    );
    // Three ticks later, every one still awaits.
    still_awaiting(&env, &attack);
    still_awaiting(&env, &attack);
    still_awaiting(&env, &attack);
}

#[test]
fn a_step_cannot_send_the_trusted_proxys_header_itself() {
    let env = Env::new();
    let server = Server::start(
        &env,
        &[
            "--trust-header",
            "X-Forwarded-User",
            "--trusted-proxy",
            "127.0.0.1",
        ],
    );
    // As a same-host process would: the page's CSRF token, then its form.
    let route = "csrf=$(curl -s -H 'X-Forwarded-User: ann' \"$URL/loops/agent/review\" | grep -o 'name=\"csrf\" value=\"[^\"]*\"' | head -n 1 | sed 's/.*value=\"//; s/\"$//'); echo \"csrf: ${csrf:-none}\"\ncurl -s -o /dev/null -w 'form: %{http_code}\\n' -X POST -H 'X-Forwarded-User: ann' --data-urlencode \"csrf=$csrf\" \"$URL/loops/agent/approve\" || echo 'form: no connection'\n";
    let attack = attack(&env, route, Some(&server.url("")));
    still_awaiting(&env, &attack);
    assert!(attack.log.contains("form: "), "{}", attack.log);
}
