//! The console in a real browser: tests/browser/console.mjs drives Debian's
//! headless Chromium with playwright-core (pinned in
//! tests/browser/package-lock.json) against the real `automaton serve`:
//! sign in, the awaiting loop first, its review, an approval with a note
//! from a phone-sized page, a running tick's output appended without a
//! reload, a change shown live, and a viewer who sees no
//! Approve button and whose forged POST is refused. Skipped, saying so,
//! without Chromium or `npm ci` in tests/browser; failed instead when
//! `AUTOMATON_REQUIRE_BROWSER=1` (as CI sets).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::Env;

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// Chromium and playwright-core, when both are there.
fn tools() -> Option<PathBuf> {
    let chromium =
        std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from);
    let playwright = browser_dir().join("node_modules/playwright-core");
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let missing = match (chromium.exists(), playwright.is_dir(), node) {
        (true, true, true) => return Some(chromium),
        (false, _, _) => format!("no Chromium at {}", chromium.display()),
        (_, false, _) => "no playwright-core (run `npm ci` in tests/browser)".to_owned(),
        (_, _, false) => "no node".to_owned(),
    };
    assert!(
        std::env::var("AUTOMATON_REQUIRE_BROWSER").as_deref() != Ok("1"),
        "AUTOMATON_REQUIRE_BROWSER=1, but {missing}"
    );
    eprintln!("skipped: {missing}");
    None
}

fn token(env: &Env, name: &str) -> String {
    let v: Value = serde_json::from_str(&env.ok(&["user", "add", name, "--json"])).unwrap();
    v["token"].as_str().unwrap().to_owned()
}

#[test]
fn a_phone_signs_in_reviews_and_approves_and_a_viewer_cannot() {
    let Some(chromium) = tools() else {
        return;
    };
    let env = Env::new();
    let roles = "[access]\napprovers = [\"ann\"]\noperators = [\"ann\", \"operator\"]\n";
    env.new_loop("another", &format!("step = \"true\"\n{roles}"));
    env.new_loop(
        "waiting",
        &format!(
            "step = \"echo hello from the step\"\n[[gate]]\nstock = \"approve-every\"\nparams = {{ every = 1 }}\n{roles}"
        ),
    );
    env.new_loop("other", &format!("step = \"true\"\n{roles}"));
    for _ in 0..2 {
        env.ok(&["tick", "waiting"]);
    }
    assert_eq!(env.status("waiting")["status"], "awaiting_approval");
    // A tick that writes a line every half second while the browser looks.
    env.new_loop(
        "slow",
        &format!("step = \"for i in $(seq 1 40); do echo line $i; sleep 0.5; done\"\n{roles}"),
    );
    let mut slow = env.cmd().args(["tick", "slow"]).spawn().unwrap();
    while env.status("slow")["in_flight"].is_null() {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (ann, vic) = (token(&env, "ann"), token(&env, "vic"));
    let server = crate::serve::Server::start(&env, &[]);
    let out = Command::new("node")
        .arg(browser_dir().join("console.mjs"))
        .env("CONSOLE_URL", server.url(""))
        .env("APPROVER_TOKEN", &ann)
        .env("VIEWER_TOKEN", &vic)
        .env("CHROMIUM", &chromium)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = slow.kill();
    let _ = slow.wait();
    assert!(out.status.success(), "{said}\nserver log:\n{}", server.log());
    let history = env.history("waiting");
    let approved = history.iter().rev().find(|e| e["kind"] == "approved").unwrap();
    assert_eq!(
        (
            approved["by"].as_str(),
            approved["note"].as_str(),
            approved["actor"]["via"].as_str()
        ),
        (Some("ann"), Some("approved from a phone"), Some("token"))
    );
    assert!(history.iter().all(|e| e["note"] != "forged"));
    // The viewer's own form, posted anyway, met the role check, which
    // recorded it; the one without its CSRF token was stopped before.
    let refused: Vec<_> = history.iter().filter(|e| e["kind"] == "refused").collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(
        (refused[0]["by"].as_str(), refused[0]["action"].as_str()),
        (Some("vic"), Some("approve"))
    );
    assert_eq!(env.status("other")["status"], "paused");
}
