//! `automaton serve`: the real binary on a free port of 127.0.0.1, driven
//! over HTTP as a client would, on whichever store the suite runs
//! against. Users and tokens, the JSON API in the CLI's `--json` shapes,
//! the role check, sessions and CSRF, the live feed and who it tells,
//! hostile input (bad tokens, bad bodies, a slow client, many clients at
//! once), and the drain on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::Env;

/// A running server, stopped when dropped.
pub(crate) struct Server {
    child: Child,
    base: String,
    addr: String,
    log: tempfile::NamedTempFile,
}

impl Server {
    pub(crate) fn start(env: &Env, extra: &[&str]) -> Server {
        Server::start_at(env, "127.0.0.1:0", extra)
    }

    /// A server listening on `listen` (a TCP address, or `unix:PATH`).
    pub(crate) fn start_at(env: &Env, listen: &str, extra: &[&str]) -> Server {
        let mut cmd = env.cmd();
        cmd.args(["serve", "--listen", listen, "-v"]).args(extra);
        Server::spawn(cmd)
    }

    /// A server on 127.0.0.1 that starts with a soft limit of `soft` open
    /// files (systemd's default is 1,024), its hard limit left as it is.
    fn start_with_soft_limit(env: &Env, soft: u64) -> Server {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        use std::os::unix::process::CommandExt;
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        let mut cmd = env.cmd();
        cmd.args(["serve", "--listen", "127.0.0.1:0", "-v"]);
        // SAFETY: only setrlimit(2), async-signal-safe, runs in the child.
        unsafe {
            cmd.pre_exec(move || {
                setrlimit(Resource::RLIMIT_NOFILE, soft, hard).map_err(std::io::Error::from)
            });
        }
        Server::spawn(cmd)
    }

    fn spawn(mut cmd: std::process::Command) -> Server {
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("serve said {line:?}"))
            .to_owned();
        let addr = base
            .split_once("://")
            .map_or(base.as_str(), |(_, a)| a)
            .to_owned();
        Server {
            child,
            base,
            addr,
            log,
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// SIGTERM, then its exit code.
    pub(crate) fn stop(mut self) -> Option<i32> {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        self.child.wait().unwrap().code()
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .max_redirects_will_error(false)
        .timeout_global(Some(Duration::from_mins(1)))
        .build()
        .into()
}

/// A response's status and body.
pub(crate) fn answer(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> (u16, String) {
    let mut r = r.unwrap();
    (
        r.status().as_u16(),
        r.body_mut().read_to_string().unwrap_or_default(),
    )
}

pub(crate) fn get(s: &Server, path: &str, token: &str) -> (u16, String) {
    answer(
        agent()
            .get(s.url(path))
            .header("Authorization", format!("Bearer {token}"))
            .call(),
    )
}

pub(crate) fn post(s: &Server, path: &str, token: &str, body: &str) -> (u16, String) {
    answer(
        agent()
            .post(s.url(path))
            .header("Authorization", format!("Bearer {token}"))
            .content_type("application/json")
            .send(body),
    )
}

fn code(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    v["code"].as_str().unwrap_or_default().to_owned()
}

/// Makes user `name`; its token.
pub(crate) fn user(env: &Env, name: &str) -> String {
    let v: Value = serde_json::from_str(&env.ok(&["user", "add", name, "--json"])).unwrap();
    v["token"].as_str().unwrap().to_owned()
}

fn tick(env: &Env, name: &str) -> String {
    let v: Value = serde_json::from_str(&env.ok(&["tick", name, "--json"])).unwrap();
    v["outcome"].as_str().unwrap().to_owned()
}

/// A loop that ran one tick and now awaits approval.
pub(crate) fn awaiting(env: &Env, name: &str, extra: &str) {
    env.new_loop(
        name,
        &format!("step = \"echo hello from the step\"\n[[gate]]\nstock = \"approve-every\"\nparams = {{ every = 1 }}\n{extra}"),
    );
    assert_eq!(tick(env, name), "ran");
    assert_eq!(tick(env, name), "awaiting-approval");
}

#[test]
fn user_tokens_are_printed_once_and_kept_only_as_hashes() {
    let env = Env::new();
    let token = user(&env, "ann");
    assert!(token.starts_with("atm_"), "{token}");
    let listed = env.ok(&["user", "list", "--json"]);
    assert!(listed.contains("\"ann\"") && !listed.contains(&token), "{listed}");
    if env.pg.is_none() {
        let file = env.root.join("users.json");
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(!text.contains(&token), "{text}");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o077, 0);
    }
    env.fails(1, &["user", "add", "ann"]);
    env.fails(2, &["user", "add", "no/slashes"]);
    env.fails(3, &["user", "rotate", "bob"]);
    let rotated = env.ok(&["user", "rotate", "ann"]);
    assert!(!rotated.contains(&token), "{rotated}");
    env.ok(&["user", "remove", "ann"]);
    env.fails(3, &["user", "remove", "ann"]);
}

#[test]
fn the_api_answers_in_the_shapes_of_the_clis_json() {
    let env = Env::new();
    awaiting(&env, "demo", "");
    env.new_loop("other", "step = \"true\"\n");
    let token = user(&env, "ann");
    let s = Server::start(&env, &[]);
    assert_eq!(answer(agent().get(s.url("/healthz")).call()).0, 200);
    let (status, body) = get(&s, "/api/loops", &token);
    assert_eq!(status, 200, "{body}");
    let cli: Value = serde_json::from_str(&env.ok(&["list", "--json"])).unwrap();
    let api: Value = serde_json::from_str(&body).unwrap();
    let names = |v: &Value| {
        v.as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&api), names(&cli));
    assert_eq!(api[0]["status"], "awaiting_approval");
    let (status, body) = get(&s, "/api/loops/demo", &token);
    assert_eq!(status, 200);
    let one: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (one["name"].as_str(), one["version"].clone()),
        (Some("demo"), env.status("demo")["version"].clone())
    );
    let (_, body) = get(&s, "/api/loops/demo/history?limit=2", &token);
    assert_eq!(
        serde_json::from_str::<Value>(&body)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let (_, body) = get(&s, "/api/loops/demo/review", &token);
    let review: Value = serde_json::from_str(&body).unwrap();
    let await_id = review["awaiting"]["id"].as_str().unwrap().to_owned();
    assert_eq!(review["loop"], "demo");
    let (status, body) = get(&s, "/api/loops/demo/runs/1/logs", &token);
    assert_eq!((status, body.as_str()), (200, "hello from the step\n"));
    let (status, body) = get(&s, "/api/openapi.json", &token);
    assert!(status == 200 && body.contains("/api/loops/{name}/approve"));

    let (status, body) = post(
        &s,
        "/api/loops/demo/approve",
        &token,
        &json!({"note": "ship it", "await": await_id}).to_string(),
    );
    assert_eq!(status, 200, "{body}");
    let approved = env
        .history("demo")
        .into_iter()
        .rev()
        .find(|e| e["kind"] == "approved")
        .unwrap();
    assert_eq!(
        (approved["by"].as_str(), approved["note"].as_str()),
        (Some("ann"), Some("ship it"))
    );
    assert_eq!(approved["actor"]["via"], "token");
    // The same await again: not pending any more (a stale await).
    let (status, body) = post(
        &s,
        "/api/loops/demo/reject",
        &token,
        &json!({"await": "aw-999"}).to_string(),
    );
    assert_eq!((status, code(&body)), (409, "refused".to_owned()), "{body}");
    let (status, _) = post(&s, "/api/loops/other/pause", &token, "");
    assert_eq!(status, 200);
    assert_eq!(env.status("other")["status"], "paused");
    let (status, _) = post(&s, "/api/loops/other/resume", &token, "{}");
    assert_eq!(status, 200);
    assert_eq!(s.stop(), Some(0));
}

/// Each verb, on twin loops, once by the command line and once by the
/// API: the two answers have the same shape.
#[test]
fn each_verb_answers_the_api_in_the_shape_of_its_clis_json() {
    let env = Env::new();
    for name in ["by-cli", "by-api"] {
        awaiting(&env, name, "");
    }
    let token = user(&env, "ann");
    let s = Server::start(&env, &[]);
    let steps: [(&str, &[&str], Value); 6] = [
        ("pause", &["--reason", "freeze"], json!({"reason": "freeze"})),
        ("resume", &[], json!({})),
        ("approve", &["--note", "ship it"], json!({"note": "ship it"})),
        ("pause", &[], json!({})),
        ("cancel", &[], json!({})),
        ("reject", &["--reason", "no"], json!({"reason": "no"})),
    ];
    for (verb, flags, body) in steps {
        let mut args = vec![verb, "by-cli", "--json"];
        args.extend(flags);
        let cli: Value = serde_json::from_str(&env.ok(&args)).unwrap();
        let (status, answer) = post(
            &s,
            &format!("/api/loops/by-api/{verb}"),
            &token,
            &body.to_string(),
        );
        assert_eq!(status, 200, "{verb}: {answer}");
        let api: Value = serde_json::from_str(&answer).unwrap();
        let shape = crate::snapshots::shape;
        assert_eq!(shape(&api), shape(&cli), "{verb}");
    }
    // Each change is recorded as the user the server acted for.
    for kind in ["paused", "resumed", "approved", "rejected"] {
        let event = env
            .history("by-api")
            .into_iter()
            .find(|e| e["kind"] == kind)
            .unwrap();
        assert_eq!(
            (event["actor"]["user"].as_str(), event["actor"]["via"].as_str()),
            (Some("ann"), Some("token")),
            "{kind}"
        );
    }
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn the_api_answers_every_view_as_the_cli_prints_it() {
    let env = Env::new();
    awaiting(&env, "demo", "");
    env.new_loop("failing", "step = \"echo out; echo err >&2; exit 2\"\n");
    assert_eq!(env.run(&["tick", "failing"]).status.code(), Some(6));
    let token = user(&env, "ann");
    let s = Server::start(&env, &[]);
    let cli = |args: &[&str]| -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        serde_json::from_str(&env.ok(&args)).unwrap()
    };
    let api = |path: &str| -> Value {
        let (status, body) = get(&s, path, &token);
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap()
    };
    assert_eq!(api("/api/loops"), cli(&["list"]));
    for name in ["demo", "failing"] {
        assert_eq!(api(&format!("/api/loops/{name}")), cli(&["status", name]));
        assert_eq!(
            api(&format!("/api/loops/{name}/history")),
            cli(&["history", name])
        );
        assert_eq!(
            api(&format!("/api/loops/{name}/history?limit=1")),
            cli(&["history", name, "--limit", "1"])
        );
        assert_eq!(api(&format!("/api/loops/{name}/review")), cli(&["review", name]));
        assert_eq!(
            api(&format!("/api/loops/{name}/review?diff=true")),
            cli(&["review", name, "--diff"])
        );
    }
    let text = |path: &str| get(&s, path, &token);
    assert_eq!(text("/api/loops/failing/runs/1/logs"), (200, "out\n".to_owned()));
    assert_eq!(
        text("/api/loops/failing/runs/1/logs?stderr=true"),
        (200, "err\n".to_owned())
    );
    assert_eq!(s.stop(), Some(0));
}

/// A tick's output past the bound is answered up to it, then said in one
/// line; the CLI still prints it whole.
#[test]
fn a_large_output_is_answered_up_to_a_bound_then_counted() {
    let env = Env::new();
    env.new_loop(
        "loud",
        "step = \"yes aaaaaaa | head -c 3145728\"\n[runs]\noutput_limit = \"8MiB\"\n",
    );
    let token = user(&env, "ann");
    tick(&env, "loud");
    let s = Server::start(&env, &[]);
    let (status, body) = get(&s, "/api/loops/loud/runs/1/logs", &token);
    let kept = "aaaaaaa\n".repeat(1024 * 1024 / 8);
    assert_eq!(status, 200);
    assert_eq!(body.len(), kept.len() + "[truncated, 2097152 bytes more]\n".len());
    assert_eq!(body, format!("{kept}[truncated, 2097152 bytes more]\n"));
    assert_eq!(env.ok(&["logs", "loud", "1"]).len(), 3 * 1024 * 1024);
    assert_eq!(s.stop(), Some(0));
}

/// A long history is answered by its last 1,000 events unless a `limit`
/// asks for others.
#[test]
fn a_long_history_is_answered_by_its_last_events() {
    let env = crate::files_only!("lengthens history.jsonl by hand");
    env.new_loop("long", "step = \"true\"\n");
    let path = env.loop_dir("long").join("history.jsonl");
    let first = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .to_owned();
    let mut journal = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    for _ in 0..1_500 {
        writeln!(journal, "{first}").unwrap();
    }
    drop(journal);
    let token = user(&env, "ann");
    let s = Server::start(&env, &[]);
    let count = |path: &str| {
        let (status, body) = get(&s, path, &token);
        assert_eq!(status, 200, "{body}");
        serde_json::from_str::<Value>(&body)
            .unwrap()
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(count("/api/loops/long/history"), 1_000);
    assert_eq!(count("/api/loops/long/history?limit=1200"), 1_200);
    assert_eq!(count("/api/loops/long/history?limit=3"), 3);
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn a_loop_whose_state_cannot_be_read_is_answered_as_invalid_state() {
    let env = crate::files_only!("corrupts .state.loop by hand");
    env.new_loop("demo", "step = \"true\"\n");
    let token = user(&env, "ann");
    std::fs::write(env.loop_dir("demo").join(".state.loop"), "not json at all").unwrap();
    let s = Server::start(&env, &[]);
    let (status, body) = get(&s, "/api/loops/demo", &token);
    assert_eq!((status, code(&body)), (500, "invalid_state".to_owned()), "{body}");
    assert!(body.contains(".state.loop"), "{body}");
    // The file is named, never where the server keeps it; nor is the
    // root told by a 404.
    let root = env.root.display().to_string();
    assert!(!body.contains(&root), "{body}");
    let (status, body) = get(&s, "/api/loops/nope", &token);
    assert_eq!((status, code(&body)), (404, "no_such_loop".to_owned()), "{body}");
    assert!(!body.contains(&root), "{body}");
    let (status, body) = post(&s, "/api/loops/demo/pause", &token, "");
    assert_eq!((status, code(&body)), (500, "invalid_state".to_owned()), "{body}");
    assert_eq!(
        std::fs::read(env.loop_dir("demo").join(".state.loop")).unwrap(),
        b"not json at all"
    );
}

#[test]
fn refused_requests_write_nothing_and_roles_are_the_clis() {
    let env = Env::new();
    awaiting(
        &env,
        "demo",
        "[access]\napprovers = [\"lead\"]\noperators = [\"lead\", \"operator\"]\n",
    );
    env.new_loop("secret", "step = \"true\"\n[access]\nviewers = [\"lead\"]\n");
    let (lead, viewer) = (user(&env, "lead"), user(&env, "viewer"));
    let s = Server::start(&env, &[]);
    let before = env.state("demo");
    let events = env.history("demo").len();
    let cases: Vec<(&str, &str, &str, u16, &str)> = vec![
        ("/api/loops/demo/approve", "atm_wrong", "{}", 401, "unauthorized"),
        ("/api/loops/nosuch/approve", &lead, "{}", 404, "no_such_loop"),
        (
            "/api/loops/demo/approve",
            &lead,
            "{\"note\": ",
            422,
            "invalid_body",
        ),
        (
            "/api/loops/demo/approve",
            &lead,
            "{\"halt\": true}",
            422,
            "invalid_body",
        ),
        (
            "/api/loops/demo/pause",
            &lead,
            "{\"note\": \"x\"}",
            422,
            "invalid_body",
        ),
        ("/api/loops/demo/approve", &lead, "[1, 2]", 422, "invalid_body"),
    ];
    for (path, token, body, status, want) in cases {
        let (got, text) = post(&s, path, token, body);
        assert_eq!(
            (got, code(&text)),
            (status, want.to_owned()),
            "{path} {body}: {text}"
        );
    }
    let big = json!({ "note": "x".repeat(70 * 1024) }).to_string();
    let (got, text) = post(&s, "/api/loops/demo/approve", &lead, &big);
    assert_eq!((got, code(&text)), (413, "too_large".to_owned()));
    let (got, _) = answer(
        agent()
            .post(s.url("/api/loops/demo/approve"))
            .header("Authorization", format!("Bearer {lead}"))
            .content_type("text/plain")
            .send("note"),
    );
    assert_eq!(got, 415);
    assert_eq!(answer(agent().get(s.url("/api/loops")).call()).0, 401);
    assert_eq!(env.state("demo"), before);
    assert_eq!(env.history("demo").len(), events);

    // A viewer's approval is refused and recorded as the CLI records it.
    let (got, text) = post(&s, "/api/loops/demo/approve", &viewer, "{}");
    assert_eq!((got, code(&text)), (403, "forbidden".to_owned()), "{text}");
    let refused = env.history("demo").pop().unwrap();
    assert_eq!(
        (refused["kind"].as_str(), refused["by"].as_str()),
        (Some("refused"), Some("viewer"))
    );
    assert_eq!(
        env.state("demo")["pending_approvals"],
        before["pending_approvals"]
    );
    // A loop with viewers is hidden from anyone else.
    let (_, body) = get(&s, "/api/loops", &viewer);
    assert!(!body.contains("\"secret\""), "{body}");
    assert_eq!(get(&s, "/api/loops/secret", &viewer).0, 403);
    assert_eq!(get(&s, "/api/loops/secret", &lead).0, 200);
    assert_eq!(s.stop(), Some(0));
}

/// An open `GET /events` stream, read one event at a time.
struct Events(BufReader<ureq::BodyReader<'static>>);

impl Events {
    fn open(s: &Server, token: &str) -> Events {
        let r = agent()
            .get(s.url("/events"))
            .header("Authorization", format!("Bearer {token}"))
            .call()
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        Events(BufReader::new(r.into_body().into_reader()))
    }

    /// The next `change` event's data: a loop's name, or `*`.
    fn next(&mut self) -> String {
        loop {
            let mut line = String::new();
            assert!(self.0.read_line(&mut line).unwrap() > 0, "the stream ended");
            if let Some(data) = line.trim_end().strip_prefix("data:") {
                return data.trim().to_owned();
            }
        }
    }

    /// The next `change` event that names a loop (a `*`, loops came or
    /// went, is passed over).
    fn next_loop(&mut self) -> String {
        loop {
            let data = self.next();
            if data != "*" {
                return data;
            }
        }
    }

    /// The first loop the stream still names before it ends, if any (a
    /// `*` is passed over).
    fn loop_before_the_end(&mut self) -> Option<String> {
        loop {
            let mut line = String::new();
            if self.0.read_line(&mut line).unwrap_or(0) == 0 {
                return None;
            }
            if let Some(data) = line.trim_end().strip_prefix("data:")
                && data.trim() != "*"
            {
                return Some(data.trim().to_owned());
            }
        }
    }
}

/// A user removed, or whose token is rotated, while a page is open: its
/// stream ends and names no loop after, while another user's goes on.
#[test]
fn a_removed_or_rotated_users_live_stream_ends() {
    let env = Env::new();
    env.new_loop("feed-gone", "step = \"true\"\n");
    let (ann, bob, cat) = (user(&env, "ann"), user(&env, "bob"), user(&env, "cat"));
    let s = Server::start(&env, &[]);
    let mut anns = Events::open(&s, &ann);
    let mut bobs = Events::open(&s, &bob);
    let mut cats = Events::open(&s, &cat);
    env.ok(&["pause", "feed-gone"]);
    assert_eq!(anns.next_loop(), "feed-gone");
    assert_eq!(bobs.next_loop(), "feed-gone");
    env.ok(&["user", "remove", "ann"]);
    env.ok(&["user", "rotate", "bob"]);
    env.ok(&["resume", "feed-gone"]);
    assert_eq!(cats.next_loop(), "feed-gone");
    assert_eq!(anns.loop_before_the_end(), None);
    assert_eq!(bobs.loop_before_the_end(), None);
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn the_live_feed_names_a_loop_only_to_those_who_may_view_it() {
    let env = Env::new();
    env.new_loop("feed-secret", "step = \"true\"\n[access]\nviewers = [\"lead\"]\n");
    env.new_loop("feed-open", "step = \"true\"\n");
    let (lead, other) = (user(&env, "lead"), user(&env, "other"));
    let s = Server::start(&env, &[]);
    let (mut leads, mut others) = (Events::open(&s, &lead), Events::open(&s, &other));
    env.ok(&["pause", "feed-secret"]);
    assert_eq!(leads.next_loop(), "feed-secret");
    // A change both may see, after it: the first the other user is told of.
    env.ok(&["pause", "feed-open"]);
    assert_eq!(others.next_loop(), "feed-open");
    loop {
        match leads.next_loop().as_str() {
            "feed-open" => break,
            name => assert_eq!(name, "feed-secret"),
        }
    }
    assert_eq!(s.stop(), Some(0));
}

/// One change feed for both stores: a loop made while the console runs
/// is named to those who may view it (as a change to it), on the file
/// store as on PostgreSQL, and to nobody else.
#[test]
fn the_live_feed_names_a_new_loop_to_its_viewers() {
    let env = Env::new();
    env.new_loop("feed-open", "step = \"true\"\n");
    let (lead, other) = (user(&env, "lead"), user(&env, "other"));
    let s = Server::start(&env, &[]);
    let (mut leads, mut others) = (Events::open(&s, &lead), Events::open(&s, &other));
    env.new_loop("feed-new", "step = \"true\"\n[access]\nviewers = [\"lead\"]\n");
    env.ok(&["pause", "feed-open"]);
    // Before, the file store's feed said only `*` of a new loop.
    assert_eq!(leads.next_loop(), "feed-new");
    assert_eq!(others.next_loop(), "feed-open");
    assert_eq!(s.stop(), Some(0));
}

/// The server whose notification connection is cut listens again, tells
/// every page of the gap (`*`: reload), and then of each change again.
#[test]
fn the_live_feed_listens_again_when_its_connection_is_cut() {
    let Some(env) = Env::postgres() else { return };
    let pg = env.pg.as_ref().unwrap();
    let app = format!("automaton-{}", pg.schema);
    env.new_loop("feed-relisten", "step = \"true\"\n");
    let token = user(&env, "ann");
    let store = format!("{}&application_name={app}", pg.url);
    let s = Server::start(&env, &["--store", &store]);
    let mut events = Events::open(&s, &token);
    let cut = pg
        .client()
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND query LIKE 'LISTEN%'",
            &[&app],
        )
        .unwrap();
    assert_eq!(cut.len(), 1, "the server's one listening connection");
    let deadline = std::time::Instant::now() + Duration::from_mins(1);
    while !s.log().contains("listening for changes again") {
        assert!(std::time::Instant::now() < deadline, "{}", s.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    env.ok(&["pause", "feed-relisten"]);
    // The gap told as `*` first (the channel is the database's: other
    // roots' changes may come too, and are passed over).
    let mut gap = false;
    loop {
        match events.next().as_str() {
            "*" => gap = true,
            "feed-relisten" => break,
            _ => {}
        }
    }
    assert!(gap, "the gap is told before the next change");
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn a_removed_or_rotated_token_signs_no_one_in_and_no_token_is_logged() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let token = user(&env, "ann");
    let s = Server::start(&env, &[]);
    assert_eq!(get(&s, "/api/loops", &token).0, 200);
    env.ok(&["user", "rotate", "ann"]);
    assert_eq!(get(&s, "/api/loops", &token).0, 401);
    let bob = user(&env, "bob");
    assert_eq!(get(&s, "/api/loops", &bob).0, 200);
    env.ok(&["user", "remove", "bob"]);
    assert_eq!(get(&s, "/api/loops", &bob).0, 401);
    assert!(
        !s.log().contains(&token) && !s.log().contains(&bob),
        "{}",
        s.log()
    );
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn only_failed_sign_ins_are_limited_and_a_correct_token_always_signs_in() {
    let env = Env::new();
    let token = user(&env, "ann");
    let s = Server::start(&env, &[]);
    let mut statuses = Vec::new();
    for _ in 0..12 {
        statuses.push(get(&s, "/api/loops", "atm_guess").0);
    }
    assert_eq!(&statuses[..10], &[401; 10]);
    assert_eq!(&statuses[10..], &[429, 429]);
    // The right token is never refused, by header or by the form.
    assert_eq!(get(&s, "/api/loops", &token).0, 200);
    let (id, _) = sign_in(&s, &token);
    assert!(!id.is_empty());
    assert_eq!(get(&s, "/api/loops", "atm_guess").0, 429);
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn behind_the_trusted_proxy_failures_are_counted_per_client_it_names() {
    let env = Env::new();
    let s = Server::start(
        &env,
        &[
            "--trust-header",
            "X-Forwarded-User",
            "--trusted-proxy",
            "127.0.0.1",
        ],
    );
    let from = |client: &str| {
        answer(
            agent()
                .get(s.url("/api/loops"))
                .header("Authorization", "Bearer atm_guess")
                .header("X-Forwarded-For", format!("203.0.113.9, {client}"))
                .call(),
        )
        .0
    };
    let first: Vec<u16> = (0..11).map(|_| from("198.51.100.1")).collect();
    assert_eq!(first[10], 429, "{first:?}");
    // Another client behind the same proxy is not limited by the first.
    assert_eq!(from("198.51.100.2"), 401);
    assert_eq!(s.stop(), Some(0));
}

/// The status line of a GET of `path` naming `host` in its `Host`.
fn status_for_host(s: &Server, path: &str, host: &str, token: &str) -> String {
    let said = raw(
        s,
        format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    said.lines().next().unwrap_or_default().to_owned()
}

#[test]
fn a_request_for_a_host_name_not_the_consoles_is_refused() {
    let env = Env::new();
    let token = user(&env, "ann");
    let s = Server::start(&env, &["--allowed-host", "Console.Example"]);
    let port = s.addr.rsplit_once(':').unwrap().1.to_owned();
    // A name an attacker's DNS points at this server (DNS rebinding).
    for host in [
        "evil.example",
        &format!("evil.example:{port}"),
        "console.example.evil",
    ] {
        let line = status_for_host(&s, "/api/loops", host, &token);
        assert!(line.starts_with("HTTP/1.1 421"), "{host}: {line}");
    }
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "console.example".to_owned(),
        format!("CONSOLE.example.:{port}"),
        "[::1]".to_owned(),
    ] {
        let line = status_for_host(&s, "/api/loops", &host, &token);
        assert!(line.starts_with("HTTP/1.1 200"), "{host}: {line}");
    }
    assert_eq!(s.stop(), Some(0));
}

/// Signs in with the form as a browser does; the session cookie and the
/// page's CSRF token.
pub(crate) fn sign_in(s: &Server, token: &str) -> (String, String) {
    let mut form = agent().get(s.url("/signin")).call().unwrap();
    let pre = set_cookie(&form, "automaton_signin");
    let page = form.body_mut().read_to_string().unwrap();
    let csrf = hidden(&page, "csrf");
    let r = agent()
        .post(s.url("/signin"))
        .header("Cookie", format!("automaton_signin={pre}"))
        .send_form([("token", token), ("csrf", csrf.as_str())])
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let cookie = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect::<Vec<_>>();
    let session = cookie
        .iter()
        .find(|c| c.starts_with("automaton_session="))
        .unwrap();
    assert!(
        session.contains("HttpOnly") && session.contains("SameSite=Strict"),
        "{session}"
    );
    let id = session
        .split(';')
        .next()
        .unwrap()
        .trim_start_matches("automaton_session=")
        .to_owned();
    let mut home = agent()
        .get(s.url("/"))
        .header("Cookie", format!("automaton_session={id}"))
        .call()
        .unwrap();
    let page = home.body_mut().read_to_string().unwrap();
    (id, hidden(&page, "csrf"))
}

fn set_cookie(r: &ureq::http::Response<ureq::Body>, name: &str) -> String {
    let c = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .find(|c| c.starts_with(name))
        .unwrap();
    c.split(';').next().unwrap().split_once('=').unwrap().1.to_owned()
}

pub(crate) fn hidden(page: &str, name: &str) -> String {
    let at = page
        .find(&format!("name=\"{name}\" value=\""))
        .unwrap_or_else(|| panic!("no {name} in {page}"));
    let rest = &page[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_owned()
}

#[test]
fn the_console_says_since_when_a_loop_awaits_and_why_its_last_tick_failed() {
    let env = Env::new();
    awaiting(&env, "demo", "[schedule]\nevery = \"1h\"\n");
    env.new_loop(
        "failing",
        "step = \"echo building; echo 'no space left' >&2; exit 2\"\n",
    );
    assert_eq!(env.run(&["tick", "failing"]).status.code(), Some(6));
    let token = user(&env, "ann");
    let s = Server::start(&env, &[]);
    let (id, _) = sign_in(&s, &token);
    let cookie = format!("automaton_session={id}");
    let page = |path: &str| answer(agent().get(s.url(path)).header("Cookie", &cookie).call());
    let (status, list) = page("/");
    assert_eq!(status, 200);
    assert!(list.contains("awaiting approval since "), "{list}");
    let (_, one) = page("/loops/demo");
    assert!(
        one.contains("awaiting approval since ") && !one.contains("Next due"),
        "{one}"
    );
    let (_, failed) = page("/loops/failing");
    assert!(
        failed.contains("step.err") && failed.contains("no space left"),
        "{failed}"
    );
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn the_review_page_shows_the_evidence_then_the_approvals_so_far_then_the_forms() {
    let env = Env::new();
    let (ann, bob) = (user(&env, "ann"), user(&env, "bob"));
    user(&env, "cy");
    awaiting(
        &env,
        "demo",
        "[access]\napprovers = [\"ann\", \"bob\", \"cy\"]\n[approval]\nrequired = 2\n",
    );
    let s = Server::start(&env, &[]);
    let (id, _) = sign_in(&s, &bob);
    let cookie = format!("automaton_session={id}");
    let page = || {
        answer(
            agent()
                .get(s.url("/loops/demo/review"))
                .header("Cookie", &cookie)
                .call(),
        )
    };
    let (status, before) = page();
    assert_eq!(status, 200);
    assert!(
        before.contains("0 of 2 approvals so far") && before.contains("May still approve: ann, bob, cy."),
        "{before}"
    );
    let (evidence, forms) = (
        before.find("Ticks since the last approval").unwrap(),
        before.find("action=\"/loops/demo/approve\"").unwrap(),
    );
    assert!(evidence < forms, "the buttons come after the evidence: {before}");
    let (status, _) = post(&s, "/api/loops/demo/approve", &ann, r#"{"note":"ship it"}"#);
    assert_eq!(status, 200);
    let (_, after) = page();
    assert!(
        after.contains("1 of 2 approvals so far")
            && after.contains("<strong>ann</strong>")
            && after.contains("ship it")
            && after.contains("May still approve: bob, cy."),
        "{after}"
    );
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn reject_and_cancel_ask_a_reason_and_a_confirmation_and_every_change_says_what_it_did() {
    let env = Env::new();
    awaiting(&env, "demo", "");
    let token = user(&env, "ann");
    let s = Server::start(&env, &[]);
    let (id, csrf) = sign_in(&s, &token);
    let cookie = format!("automaton_session={id}");
    let form = |path: &str, fields: &[(&str, &str)]| {
        let mut fields = fields.to_vec();
        fields.push(("csrf", csrf.as_str()));
        let r = agent()
            .post(s.url(path))
            .header("Cookie", &cookie)
            .send_form(fields)
            .unwrap();
        let to = r
            .headers()
            .get("location")
            .map(|l| l.to_str().unwrap().to_owned());
        (r.status().as_u16(), to, answer(Ok(r)).1)
    };
    let page = |path: &str| answer(agent().get(s.url(path)).header("Cookie", &cookie).call()).1;
    let review = page("/loops/demo/review");
    assert!(review.contains("name=\"reason\" rows=\"2\" required"), "{review}");
    let await_id = hidden(&review, "await");
    let before = env.history("demo").len();
    let (status, _, refused) = form("/loops/demo/reject", &[("await", &await_id), ("reason", " ")]);
    assert!(status == 422 && refused.contains("needs a reason"), "{refused}");
    let (status, _, asked) = form(
        "/loops/demo/reject",
        &[("await", &await_id), ("reason", "wrong branch")],
    );
    assert!(
        status == 200 && asked.contains("Yes, reject") && asked.contains("wrong branch"),
        "{asked}"
    );
    let (status, _, asked) = form("/loops/demo/cancel", &[]);
    assert!(status == 200 && asked.contains("Yes, cancel the tick"), "{asked}");
    assert!(asked.contains("name=\"reason\" rows=\"2\" required"), "{asked}");
    let (status, _, refused) = form("/loops/demo/cancel", &[("confirm", "yes"), ("reason", " ")]);
    assert!(status == 422 && refused.contains("needs a reason"), "{refused}");
    assert_eq!(
        env.history("demo").len(),
        before,
        "nothing is done before its confirmation"
    );
    assert_eq!(env.state("demo")["status"], "awaiting_approval");
    let (status, to, _) = form(
        "/loops/demo/reject",
        &[
            ("await", &await_id),
            ("reason", "wrong branch"),
            ("confirm", "yes"),
        ],
    );
    assert_eq!((status, to.as_deref()), (303, Some("/loops/demo?done=reject")));
    let rejected = env
        .history("demo")
        .into_iter()
        .rev()
        .find(|e| e["kind"] == "rejected")
        .unwrap();
    assert_eq!(rejected["reason"], "wrong branch");
    let after = page("/loops/demo?done=reject");
    assert!(
        after.contains("Rejected.") && after.contains("badge halted"),
        "{after}"
    );
    assert!(
        after.contains("value=\"resume\"") && !after.contains("value=\"pause\""),
        "{after}"
    );
    let (status, to, _) = form("/loops/demo/resume", &[]);
    assert_eq!((status, to.as_deref()), (303, Some("/loops/demo?done=resume")));
    let (status, to, _) = form("/loops/demo/pause", &[]);
    assert_eq!((status, to.as_deref()), (303, Some("/loops/demo?done=pause")));
    let paused = page("/loops/demo?done=pause");
    assert!(
        paused.contains("Paused.") && paused.contains("badge paused"),
        "{paused}"
    );
    assert!(
        paused.contains("value=\"resume\"") && !paused.contains("value=\"pause\""),
        "{paused}"
    );
    assert_eq!(s.stop(), Some(0));
}

/// The console's Cancel of a running tick: its reason asked on the
/// confirmation, kept with the tick, and shown on the tick's page.
#[test]
fn the_consoles_cancel_keeps_its_reason_with_the_tick_and_its_page_shows_it() {
    let env = Env::new();
    env.new_loop("slow", "step = \"while :; do sleep 0.05; done\"\n");
    let token = user(&env, "ann");
    let mut ticking = env
        .cmd()
        .args(["tick", "slow"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    while env.status("slow")["in_flight"].is_null() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = Server::start(&env, &[]);
    let (id, csrf) = sign_in(&s, &token);
    let cookie = format!("automaton_session={id}");
    let form = |fields: &[(&str, &str)]| {
        let mut fields = fields.to_vec();
        fields.push(("csrf", csrf.as_str()));
        let r = agent()
            .post(s.url("/loops/slow/cancel"))
            .header("Cookie", &cookie)
            .send_form(fields)
            .unwrap();
        (r.status().as_u16(), answer(Ok(r)).1)
    };
    let (status, refused) = form(&[("confirm", "yes")]);
    assert!(status == 422 && refused.contains("needs a reason"), "{refused}");
    assert!(
        !env.status("slow")["in_flight"].is_null(),
        "nothing was cancelled"
    );
    let (status, _) = form(&[("confirm", "yes"), ("reason", "wrong branch")]);
    assert_eq!(status, 303);
    assert_eq!(ticking.wait().unwrap().code(), Some(6));
    let last = env.history("slow").pop().unwrap();
    assert_eq!(
        last["cancelled"],
        json!({"by": "ann", "reason": "wrong branch"}),
        "{last}"
    );
    let page = answer(
        agent()
            .get(s.url("/loops/slow/runs/1"))
            .header("Cookie", &cookie)
            .call(),
    )
    .1;
    assert!(
        page.contains("Cancelled by") && page.contains("wrong branch"),
        "{page}"
    );
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn the_console_offers_only_the_buttons_a_loops_state_allows_and_says_what_stopped_it() {
    let env = Env::new();
    awaiting(&env, "waits", "");
    env.new_loop(
        "spender",
        "step = \"echo cost_usd=0.6 > \\\"$AUTOMATON_METRICS\\\"\"\n\
         [[gate]]\nstock = \"budget\"\nparams = { metric = \"cost_usd\", max = 1.0 }\n",
    );
    for _ in 0..3 {
        env.run(&["tick", "spender"]);
    }
    assert_eq!(env.state("spender")["status"], "halted");
    let token = user(&env, "ann");
    let s = Server::start(&env, &[]);
    let (id, _) = sign_in(&s, &token);
    let cookie = format!("automaton_session={id}");
    let page = |path: &str| answer(agent().get(s.url(path)).header("Cookie", &cookie).call()).1;
    let waits = page("/loops/waits");
    assert!(
        waits.contains("value=\"pause\"") && !waits.contains("value=\"resume\""),
        "{waits}"
    );
    let halted = page("/loops/spender");
    assert!(
        !halted.contains("value=\"pause\"") && halted.contains("value=\"resume\""),
        "{halted}"
    );
    assert!(
        halted.contains("Stopped by")
            && halted.contains("gate stock:budget")
            && halted.contains("--reset-budget")
            && halted.contains("Resume and reset the budget"),
        "{halted}"
    );
    let csrf = hidden(&halted, "csrf");
    let r = agent()
        .post(s.url("/loops/spender/resume"))
        .header("Cookie", &cookie)
        .send_form([("reset_budget", "yes"), ("csrf", csrf.as_str())])
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(env.state("spender")["status"], "active");
    assert!(
        env.history("spender").iter().any(|e| e["kind"] == "totals-reset"),
        "{:?}",
        env.history("spender")
    );
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn the_loops_page_counts_filters_searches_and_pages_and_says_no_daemon_serves_the_root() {
    let env = Env::new();
    awaiting(&env, "waits", "");
    for i in 1..=54 {
        env.new_loop(&format!("plain-{i:02}"), "step = \"true\"\n");
    }
    env.ok(&["pause", "plain-07"]);
    let token = user(&env, "ann");
    let s = Server::start(&env, &[]);
    let (id, csrf) = sign_in(&s, &token);
    let cookie = format!("automaton_session={id}");
    let page = |path: &str| answer(agent().get(s.url(path)).header("Cookie", &cookie).call()).1;
    let rows = |html: &str| html.matches("<tr class=").count();
    let first = page("/");
    assert!(
        first.contains("all 55")
            && first.contains("active 53")
            && first.contains("paused 1")
            && first.contains("awaiting approval 1")
            && first.contains("Page 1 of 2"),
        "{first}"
    );
    assert_eq!(rows(&first), 50, "{first}");
    assert!(first.contains("No daemon serves this root"), "{first}");
    let second = page("/?page=2");
    assert!(
        second.contains("Loops 51–55 of 55.") && second.contains("rel=\"prev\""),
        "{second}"
    );
    assert_eq!(rows(&second), 5);
    let paused = page("/?status=paused");
    assert!(
        paused.contains("/loops/plain-07") && rows(&paused) == 1,
        "{paused}"
    );
    let found = page("/?q=PLAIN-1");
    assert_eq!(rows(&found), 10, "{found}");
    assert!(page("/?q=nothing-like-it").contains("No loops to show."));
    let r = agent()
        .post(s.url("/loops/waits/approve"))
        .header("Cookie", &cookie)
        .send_form([("csrf", csrf.as_str())])
        .unwrap();
    let to = r.headers()["location"].to_str().unwrap().to_owned();
    let after = page(&to);
    assert!(after.contains("Approved. No daemon serves this root"), "{after}");
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn a_run_page_says_how_its_tick_ended_serves_its_output_by_offset_and_a_tick_never_run_is_not_found() {
    let env = Env::new();
    awaiting(&env, "demo", "");
    let token = user(&env, "ann");
    let s = Server::start(&env, &[]);
    let (id, _) = sign_in(&s, &token);
    let cookie = format!("automaton_session={id}");
    let get_page = |path: &str| answer(agent().get(s.url(path)).header("Cookie", &cookie).call());
    let (status, missing) = get_page("/loops/demo/runs/9999");
    assert!(status == 404 && missing.contains("has no tick 9999"), "{missing}");
    let root = env.root.display().to_string();
    assert!(!missing.contains(&root), "{missing}");
    let (status, ran) = get_page("/loops/demo/runs/1");
    assert!(
        status == 200
            && ran.contains("exit code 0")
            && ran.contains("Ran for")
            && ran.contains("data-offset=\"20\""),
        "{ran}"
    );
    let output = |from: u64| {
        let mut r = agent()
            .get(s.url(&format!("/loops/demo/runs/1/output?stream=stdout&from={from}")))
            .header("Cookie", &cookie)
            .call()
            .unwrap();
        let head = |h: &str| r.headers()[h].to_str().unwrap().to_owned();
        let (next, running) = (head("x-next-offset"), head("x-running"));
        (r.body_mut().read_to_string().unwrap(), next, running)
    };
    assert_eq!(
        output(0),
        (
            "hello from the step\n".to_owned(),
            "20".to_owned(),
            "0".to_owned()
        )
    );
    assert_eq!(output(6).0, "from the step\n");
    assert_eq!(output(20).0, "");
    assert_eq!(get_page("/loops/demo/runs/9999/output").0, 404);
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn a_browser_session_needs_its_csrf_token_and_ends_with_its_users_token() {
    let env = Env::new();
    awaiting(&env, "demo", "");
    let token = user(&env, "ann");
    let s = Server::start(&env, &[]);
    let (id, csrf) = sign_in(&s, &token);
    let cookie = format!("automaton_session={id}");
    let page = |path: &str| answer(agent().get(s.url(path)).header("Cookie", &cookie).call());
    let (status, list) = page("/");
    assert!(
        status == 200 && list.contains("demo") && list.contains("review"),
        "{list}"
    );
    let before = env.history("demo").len();
    // A form without its CSRF token, or with another's, is refused.
    for form in [vec![("note", "x")], vec![("note", "x"), ("csrf", "forged")]] {
        let r = agent()
            .post(s.url("/loops/demo/approve"))
            .header("Cookie", &cookie)
            .send_form(form)
            .unwrap();
        assert_eq!(r.status().as_u16(), 403);
    }
    let r = answer(
        agent()
            .post(s.url("/api/loops/demo/pause"))
            .header("Cookie", &cookie)
            .send_empty(),
    );
    assert_eq!((r.0, code(&r.1)), (403, "csrf".to_owned()));
    assert_eq!(env.history("demo").len(), before);
    let r = agent()
        .post(s.url("/loops/demo/approve"))
        .header("Cookie", &cookie)
        .send_form([("note", "looks good"), ("csrf", csrf.as_str())])
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    let approved = env
        .history("demo")
        .into_iter()
        .rev()
        .find(|e| e["kind"] == "approved")
        .unwrap();
    assert_eq!(
        (approved["by"].as_str(), approved["note"].as_str()),
        (Some("ann"), Some("looks good"))
    );
    env.ok(&["user", "rotate", "ann"]);
    let r = agent().get(s.url("/")).header("Cookie", &cookie).call().unwrap();
    assert_eq!(
        (r.status().as_u16(), r.headers()["location"].to_str().unwrap()),
        (303, "/signin")
    );
    assert!(!s.log().contains(&id), "{}", s.log());
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn a_proxys_header_is_believed_from_the_proxy_only() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n[access]\noperators = [\"ann\"]\n");
    let s = Server::start(
        &env,
        &[
            "--trust-header",
            "X-Forwarded-User",
            "--trusted-proxy",
            "127.0.0.1",
        ],
    );
    let (status, _) = answer(
        agent()
            .get(s.url("/api/loops"))
            .header("X-Forwarded-User", "ann")
            .call(),
    );
    assert_eq!(status, 200);
    drop(s);
    let s = Server::start(
        &env,
        &[
            "--trust-header",
            "X-Forwarded-User",
            "--trusted-proxy",
            "127.0.0.2",
        ],
    );
    let (status, _) = answer(
        agent()
            .get(s.url("/api/loops"))
            .header("X-Forwarded-User", "ann")
            .call(),
    );
    assert_eq!(status, 401);
    assert_eq!(s.stop(), Some(0));
}

/// The soft and hard limits on open files of process `pid`.
fn open_files_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
    let mut words = line.split_whitespace().skip(3);
    (words.next().unwrap().to_owned(), words.next().unwrap().to_owned())
}

/// A connection to `to` from the loopback address `from`.
fn connect_from(from: [u8; 4], to: &str) -> std::io::Result<socket2::Socket> {
    let to: std::net::SocketAddr = to.parse().unwrap();
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    sock.bind(&std::net::SocketAddr::from((from, 0)).into())?;
    sock.connect(&to.into())?;
    Ok(sock)
}

#[test]
fn an_idle_flood_from_one_client_under_a_1024_descriptor_limit_leaves_others_answered() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let token = user(&env, "ann");
    // This process holds the flood's ends: its own limit is raised.
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    let s = Server::start_with_soft_limit(&env, 1024);
    let (soft, hard) = open_files_limits(s.child.id());
    assert_eq!(soft, hard, "the server raised its soft limit to the hard one");
    // 1,100 idle connections from one client (127.0.0.2), held open.
    let flood: Vec<socket2::Socket> = (0..1100)
        .map(|_| connect_from([127, 0, 0, 2], &s.addr).unwrap())
        .collect();
    // Everyone else is still answered.
    let statuses: Vec<u16> = (0..12).map(|_| get(&s, "/api/loops", &token).0).collect();
    assert_eq!(statuses, vec![200; 12]);
    let log = s.log();
    assert!(!log.contains("Too many open files"), "{log}");
    drop(flood);
    assert_eq!(s.stop(), Some(0));
}

/// Sends `bytes` on a raw connection and returns what the server says.
fn raw(s: &Server, bytes: &[u8]) -> String {
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(bytes).unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    out
}

#[test]
fn hostile_clients_get_clear_errors_and_the_server_keeps_serving() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let token = user(&env, "ann");
    let s = Server::start(&env, &[]);
    // Half a request, left hanging, while others are served.
    let mut slow = TcpStream::connect(&s.addr).unwrap();
    slow.write_all(b"GET /api/loops HTTP/1.1\r\nHost: localhost\r\nAuthor")
        .unwrap();
    let garbage = raw(&s, b"NOT HTTP AT ALL\r\n\r\n");
    assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage}");
    let huge = format!(
        "POST /api/loops/demo/pause HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: 100000000\r\nConnection: close\r\n\r\n{{"
    );
    let said = raw(&s, huge.as_bytes());
    assert!(said.starts_with("HTTP/1.1 413"), "{said}");
    // A thousand requests, two hundred at a time, while the slow client
    // still holds its connection.
    let threads: Vec<_> = (0..200)
        .map(|i| {
            let (url, token) = (
                s.url(if i % 2 == 0 {
                    "/api/loops"
                } else {
                    "/api/loops/demo"
                }),
                token.clone(),
            );
            std::thread::spawn(move || {
                (0..5)
                    .map(|_| {
                        answer(
                            agent()
                                .get(&url)
                                .header("Authorization", format!("Bearer {token}"))
                                .call(),
                        )
                        .0
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let statuses: Vec<u16> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    assert_eq!(statuses.len(), 1000);
    assert!(statuses.iter().all(|&c| c == 200), "{statuses:?}");
    assert_eq!(get(&s, "/api/loops", &token).0, 200);
    assert_eq!(env.status("demo")["status"], "active");
    drop(slow);
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn sigterm_lets_the_request_in_flight_finish_and_exits_zero() {
    let env = Env::new();
    // A step that takes its time to stop holds the lock; a cancel request
    // waits for it when the server is told to stop.
    env.new_loop(
        "slow",
        "step = \"trap 'sleep 2; exit 1' TERM; sleep 30 & wait\"\n",
    );
    let token = user(&env, "ann");
    let mut ticking = env
        .cmd()
        .args(["tick", "slow"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    while env.status("slow")["in_flight"].is_null() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = Server::start(&env, &[]);
    let url = s.url("/api/loops/slow/cancel");
    let t = token.clone();
    let cancel = std::thread::spawn(move || {
        answer(
            agent()
                .post(url)
                .header("Authorization", format!("Bearer {t}"))
                .send_empty(),
        )
    });
    // The cancel is in flight once its note is in the run directory.
    while !env
        .loop_dir("slow")
        .join("runs")
        .read_dir()
        .into_iter()
        .flatten()
        .flatten()
        .any(|d| d.path().join("cancel").exists())
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(s.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let (status, body) = cancel.join().unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["signals"][0],
        "SIGTERM"
    );
    assert_eq!(s.stop_after_signal(), Some(0));
    ticking.wait().unwrap();
}

impl Server {
    fn stop_after_signal(mut self) -> Option<i32> {
        self.child.wait().unwrap().code()
    }
}

#[test]
fn https_serves_the_api_and_its_cookies_are_secure() {
    let env = Env::new();
    env.new_loop("demo", "step = \"true\"\n");
    let token = user(&env, "ann");
    // A self-signed certificate for 127.0.0.1, made for these tests.
    let tls = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls");
    let (cert, key) = (tls.join("cert.pem"), tls.join("key.pem"));
    let s = Server::start(
        &env,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    assert!(s.base.starts_with("https://"), "{}", s.base);
    let pem = std::fs::read(&cert).unwrap();
    let roots = ureq::tls::RootCerts::new_with_certs(&[ureq::tls::Certificate::from_pem(&pem).unwrap()]);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build())
        .build()
        .into();
    let (status, body) = answer(
        agent
            .get(s.url("/api/loops"))
            .header("Authorization", format!("Bearer {token}"))
            .call(),
    );
    assert!(status == 200 && body.contains("\"demo\""), "{status} {body}");
    let signin = agent.get(s.url("/signin")).call().unwrap();
    let cookie = signin.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(cookie.contains("; Secure"), "{cookie}");
    // Only this host, over HTTPS, may set it; and browsers keep to HTTPS.
    assert!(cookie.starts_with("__Host-automaton_signin="), "{cookie}");
    assert_eq!(
        signin.headers()["strict-transport-security"].to_str().unwrap(),
        "max-age=31536000"
    );
    // Plain HTTP on the same port is no request.
    assert!(
        !raw(
            &s,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .contains("200 OK")
    );
    // A key file that holds no certificate is refused before anything is served.
    let out = env.run(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        key.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no certificate"));
    assert_eq!(s.stop(), Some(0));
}

#[test]
fn users_added_at_the_same_time_are_all_kept() {
    let env = Env::new();
    let children: Vec<_> = (0..16)
        .map(|i| {
            env.cmd()
                .args(["user", "add", &format!("u{i:02}")])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let listed = env.ok(&["user", "list"]);
    for i in 0..16 {
        assert!(listed.contains(&format!("u{i:02}")), "u{i:02} lost: {listed}");
    }
}
