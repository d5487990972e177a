//! Who may administer a root, and what is recorded of it: `user add`,
//! `user rotate`, `user remove` and the delegates are an admin's (the
//! root's owner, or its `[access] admins`), each change is in the admin
//! record with its actor on either store, a delegate listed by hand in
//! automaton.toml counts only once an admin records it; and the console's
//! proxy is one a local process cannot impersonate: a shared secret, or a
//! Unix socket whose peer's uid is checked.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::access::{QA, code, run_as, shared, stderr, users};
use crate::common::Env;
use crate::serve::{Server, agent, answer, awaiting, hidden, user};

fn log(env: &Env) -> Vec<Value> {
    serde_json::from_str(&env.ok(&["user", "log", "--json"])).unwrap()
}

fn user_names(env: &Env) -> Vec<String> {
    let v: Value = serde_json::from_str(&env.ok(&["user", "list", "--json"])).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap().to_owned())
        .collect()
}

fn delegates(env: &Env) -> Value {
    let v: Value = serde_json::from_str(&env.ok(&["delegate", "list", "--json"])).unwrap();
    v["delegates"].clone()
}

fn refused(out: &Output, command: &str) {
    let err = stderr(out);
    assert_eq!(code(out), Some(10), "{err}");
    assert!(
        err.contains(&format!("{QA} may not `{command}`: it needs one of its admins (")),
        "{err}"
    );
    assert!(
        err.contains("nothing was changed; the attempt is recorded"),
        "{err}"
    );
}

#[test]
fn a_non_admin_may_not_change_users_or_delegates_and_nothing_changes() {
    if !users() {
        return;
    }
    // Other OS users reach the file store only: a PostgreSQL test server's
    // socket is its own user's.
    let env = crate::files_only!("runs commands as other OS users, who reach the root's files only");
    shared(&env);
    let ann = user(&env, "ann");
    // QA may write the users and the admin record (as a member of a root
    // shared by a group who once kept them may): only the role stops it.
    let files: Vec<_> = ["users.json", "users.lock", "admin.jsonl"]
        .map(|f| env.root.join(f))
        .into_iter()
        .filter(|f| f.exists())
        .collect();
    let chown = std::process::Command::new("chown")
        .arg(QA)
        .args(&files)
        .status()
        .unwrap();
    assert!(chown.success());
    let users_file = std::fs::read(env.root.join("users.json")).unwrap();
    refused(&run_as(&env, QA, &["user", "add", "bob"]), "user add");
    assert_eq!(user_names(&env), ["ann"]);
    let entries = log(&env).len();
    let recorded = delegates(&env);
    refused(&run_as(&env, QA, &["user", "rotate", "ann"]), "user rotate");
    refused(&run_as(&env, QA, &["user", "remove", "ann"]), "user remove");
    refused(&run_as(&env, QA, &["delegate", "add", QA]), "delegate add");
    let out = run_as(&env, QA, &["delegate", "remove", &automaton::who::os_user()]);
    refused(&out, "delegate remove");
    // The owner of the root is its admin while automaton.toml names none.
    assert!(stderr(&out).contains("the owner of the root"), "{}", stderr(&out));

    assert_eq!(std::fs::read(env.root.join("users.json")).unwrap(), users_file);
    assert_eq!(user_names(&env), ["ann"]);
    // The attempts are on the record; nothing else is.
    let after = log(&env);
    let tried: Vec<&str> = after[entries..]
        .iter()
        .map(|e| e["command"].as_str().unwrap())
        .collect();
    assert_eq!(
        tried,
        ["user rotate", "user remove", "delegate add", "delegate remove"]
    );
    for e in &after[entries - 1..] {
        assert_eq!(
            (e["kind"].as_str(), e["by"]["user"].as_str()),
            (Some("refused"), Some(QA)),
            "{e}"
        );
    }
    assert_eq!(delegates(&env), recorded);
    let s = Server::start(&env, &[]);
    let (status, _) = answer(
        agent()
            .get(s.url("/api/loops"))
            .header("Authorization", format!("Bearer {ann}"))
            .call(),
    );
    assert_eq!(status, 200, "ann's token still signs her in");
    drop(s);

    // Named in `[access] admins`, QA may; the owner, not named, may not.
    let file = env.root.join("automaton.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("{text}[access]\nadmins = [{QA:?}]\n")).unwrap();
    let out = run_as(&env, QA, &["user", "add", "bob"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let last = log(&env).pop().unwrap();
    assert_eq!(
        (last["kind"].as_str(), last["name"].as_str()),
        (Some("user-added"), Some("bob"))
    );
    assert_eq!(last["by"]["user"], QA);
    let err = env.fails(10, &["user", "remove", "bob"]);
    assert!(
        err.contains(&format!("it needs one of its admins ({QA}: `[access] admins` in")),
        "{err}"
    );
    assert_eq!(user_names(&env), ["ann", "bob"]);
}

#[test]
fn an_admins_changes_are_recorded_with_the_actor_on_either_store() {
    let env = Env::new();
    let me = automaton::who::os_user();
    user(&env, "ann");
    env.ok(&["user", "rotate", "ann"]);
    env.ok(&["user", "remove", "ann"]);
    // A console user named as an OS user counts as that person.
    user(&env, &me);
    env.ok(&["delegate", "add", "ci-bot"]);
    env.ok(&["delegate", "remove", "ci-bot"]);
    // A change that changes nothing records nothing.
    env.ok(&["delegate", "add", &me]);
    env.fails(3, &["user", "remove", "nobody"]);

    let entries = log(&env);
    let said: Vec<(String, String)> = entries
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want = [
        ("delegate-added", me.as_str()),
        ("user-added", "ann"),
        ("user-rotated", "ann"),
        ("user-removed", "ann"),
        ("user-added", me.as_str()),
        ("delegate-added", "ci-bot"),
        ("delegate-removed", "ci-bot"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(k, n)| ((*k).to_owned(), (*n).to_owned()))
        .collect();
    assert_eq!(said, want);
    for e in &entries {
        // The admin is the OS user, whoever `$AUTOMATON_USER` names.
        assert_eq!(e["by"]["user"], me.as_str(), "{e}");
        assert_eq!(e["by"]["via"], "os", "{e}");
        assert_eq!(e["by"]["on_behalf_of"], "operator", "{e}");
        assert!(e["at"].as_str().is_some(), "{e}");
    }
    assert_eq!(entries[1]["os_user"], false);
    assert_eq!(entries[4]["os_user"], true);
    assert_eq!(entries[6]["delegates"], serde_json::json!([me]));
    let text = env.ok(&["user", "log"]);
    assert!(
        text.contains(&format!("added user {me} (an OS user's name)")),
        "{text}"
    );
    // Where the record is kept.
    if let Some(pg) = &env.pg {
        let rows = pg
            .client()
            .query("SELECT kind FROM admin_log ORDER BY n", &[])
            .unwrap();
        assert_eq!(rows.len(), want.len());
    } else {
        let file = std::fs::read_to_string(env.root.join("admin.jsonl")).unwrap();
        assert_eq!(file.lines().count(), want.len());
        let mode = std::fs::metadata(env.root.join("admin.jsonl"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }
}

#[test]
fn a_delegate_added_by_hand_to_automaton_toml_counts_only_once_recorded() {
    let env = Env::new();
    let me = automaton::who::os_user();
    env.root_config("");
    awaiting(&env, "agent", "[access]\napprovers = [\"lead\"]\n");
    // What a step running as the root's owner could do: list itself.
    let file = env.root.join("automaton.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("delegates = [{me:?}]\n{text}")).unwrap();
    let out = env
        .cmd()
        .args(["approve", "agent"])
        .env("AUTOMATON_USER", "lead")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(code(&out), Some(10), "{err}");
    assert!(err.contains("automaton.toml: delegates"), "{err}");
    assert!(err.contains(&format!("{me} not recorded by an admin")), "{err}");
    assert!(err.contains(&format!("{me} may not `approve`")), "{err}");
    let list = env.ok(&["delegate", "list"]);
    assert!(list.contains("no delegates recorded"), "{list}");
    assert!(list.contains(&format!("delegates {me} not recorded")), "{list}");

    env.ok(&["delegate", "add", &me]);
    let out = env
        .cmd()
        .args(["approve", "agent"])
        .env("AUTOMATON_USER", "lead")
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let approved = env
        .history("agent")
        .into_iter()
        .rev()
        .find(|e| e["kind"] == "approved")
        .unwrap();
    assert_eq!(approved["actor"]["user"], "lead");
    assert_eq!(approved["actor"]["via"], "delegated");
}

/// A secret file for `--proxy-secret-file`, private to its owner.
fn secret_file(dir: &std::path::Path, secret: &str) -> String {
    let path = dir.join("proxy-secret");
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.display().to_string()
}

#[test]
fn a_proxys_header_is_believed_only_with_its_shared_secret() {
    let env = Env::new();
    awaiting(&env, "agent", "[access]\napprovers = [\"ann\"]\n");
    let dir = tempfile::tempdir().unwrap();
    let secret = "0123456789abcdef0123456789abcdef0123456789abcdef";
    let file = secret_file(dir.path(), secret);
    let s = Server::start(
        &env,
        &[
            "--trust-header",
            "X-Forwarded-User",
            "--trusted-proxy",
            "127.0.0.1",
            "--proxy-secret-file",
            &file,
        ],
    );
    let get = |secret: Option<&str>| {
        let mut r = agent()
            .get(s.url("/loops/agent"))
            .header("X-Forwarded-User", "ann");
        if let Some(secret) = secret {
            r = r.header("X-Automaton-Proxy-Secret", secret);
        }
        answer(r.call())
    };
    // A local process that sends the header from the proxy's address, with
    // no secret or a wrong one, is no one.
    assert_eq!(get(None).0, 303);
    assert_eq!(get(Some(&secret.replace('0', "1"))).0, 303);
    let (status, page) = get(Some(secret));
    assert_eq!(status, 200);
    let csrf = hidden(&page, "csrf");
    let approve = |secret: Option<&str>| {
        let mut r = agent()
            .post(s.url("/api/loops/agent/approve"))
            .header("X-Forwarded-User", "ann")
            .header("X-CSRF-Token", &csrf)
            .content_type("application/json");
        if let Some(secret) = secret {
            r = r.header("X-Automaton-Proxy-Secret", secret);
        }
        answer(r.send("{}"))
    };
    let (status, body) = approve(None);
    assert_eq!(status, 401, "{body}");
    assert!(!env.history_kinds("agent").contains(&"approved".to_owned()));
    let (status, body) = approve(Some(secret));
    assert_eq!(status, 200, "{body}");
    let approved = env
        .history("agent")
        .into_iter()
        .find(|e| e["kind"] == "approved")
        .unwrap();
    assert_eq!(approved["actor"]["user"], "ann");
    assert_eq!(approved["actor"]["via"], "proxy");
    drop(s);

    // A secret others may read, or a short one, is refused at the start.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let args = [
        "serve",
        "--trust-header",
        "X-Forwarded-User",
        "--proxy-secret-file",
        file.as_str(),
    ];
    assert!(env.fails(2, &args).contains("others may read it"));
    let short = secret_file(dir.path(), "short");
    let args = [
        "serve",
        "--trust-header",
        "X-Forwarded-User",
        "--proxy-secret-file",
        short.as_str(),
    ];
    assert!(env.fails(2, &args).contains("at least 32"));
}

/// Sends a GET of `path` on the Unix socket `socket`, with `headers`;
/// the response's status.
fn unix_get(socket: &str, path: &str, headers: &[(&str, &str)]) -> u16 {
    let mut c = UnixStream::connect(socket).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (k, v) in headers {
        req += &format!("{k}: {v}\r\n");
    }
    c.write_all(format!("{req}\r\n").as_bytes()).unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    out.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[test]
fn a_unix_socket_believes_the_header_only_from_the_proxys_uid() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let ann = user(&env, "ann");
    let me = automaton::who::os_user();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("console.sock").display().to_string();
    let listen = format!("unix:{socket}");
    let proxied = [("X-Forwarded-User", "ann")];

    let s = Server::start_at(
        &env,
        &listen,
        &["--trust-header", "X-Forwarded-User", "--trusted-proxy-user", &me],
    );
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    assert_eq!(unix_get(&socket, "/api/loops", &proxied), 200);
    assert_eq!(unix_get(&socket, "/api/loops", &[]), 401);
    // Killed, it leaves its socket; the next server replaces it.
    drop(s);
    assert!(std::path::Path::new(&socket).exists());

    // A peer of another uid is no one by the header; its token still works.
    let s = Server::start_at(
        &env,
        &listen,
        &[
            "--trust-header",
            "X-Forwarded-User",
            "--trusted-proxy-user",
            "nobody",
        ],
    );
    assert_eq!(unix_get(&socket, "/api/loops", &proxied), 401);
    let bearer = format!("Bearer {ann}");
    assert_eq!(
        unix_get(&socket, "/api/loops", &[("Authorization", &bearer)]),
        200
    );
    // Stopped, it removes its socket.
    assert_eq!(s.stop(), Some(0));
    assert!(!std::path::Path::new(&socket).exists());

    // Over TCP a peer's uid is not known: no header is believed by it, and
    // an address is no proxy on a Unix socket.
    let tcp = [
        "serve",
        "--trust-header",
        "X-Forwarded-User",
        "--trusted-proxy-user",
        me.as_str(),
    ];
    assert!(env.fails(2, &tcp).contains("needs --listen unix:PATH"));
    let addr = [
        "serve",
        "--listen",
        listen.as_str(),
        "--trust-header",
        "X-Forwarded-User",
        "--trusted-proxy",
        "127.0.0.1",
    ];
    assert!(env.fails(2, &addr).contains("no address"));
    let alone = ["serve", "--trust-header", "X-Forwarded-User"];
    assert!(
        env.fails(2, &alone)
            .contains("needs the proxy it is believed from")
    );
}
