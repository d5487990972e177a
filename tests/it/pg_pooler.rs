//! The PostgreSQL store behind Debian's pgbouncer: in session pooling the
//! commands work and the server-side timeouts the store sets are in force
//! (they are set once connected, not as start-up `options`, which
//! pgbouncer refuses); in transaction pooling, where the store's session
//! state (a loop's advisory lock, its prepared statements) would be lost
//! between transactions, a command is refused saying why. The test skips
//! without pgbouncer, and fails instead with `AUTOMATON_REQUIRE_PGBOUNCER=1`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::common::{Env, PgStore, test_store, wait_for};

const PGBOUNCER: &str = "/usr/sbin/pgbouncer";

/// Whether pgbouncer is here; says the test was skipped when it is not,
/// or fails it when `AUTOMATON_REQUIRE_PGBOUNCER=1`.
fn have_pgbouncer() -> bool {
    if Path::new(PGBOUNCER).exists() {
        return true;
    }
    assert!(
        std::env::var("AUTOMATON_REQUIRE_PGBOUNCER").as_deref() != Ok("1"),
        "AUTOMATON_REQUIRE_PGBOUNCER=1, but {PGBOUNCER} is not installed"
    );
    eprintln!("skipped: no pgbouncer ({PGBOUNCER}; Debian's package pgbouncer)");
    false
}

/// A login role for the test whose sessions use the test's schema (a role's
/// own `search_path`, which pgbouncer's reset between clients keeps: the
/// URL's `options` would be refused), dropped when the test ends.
struct Role {
    name: String,
    base: String,
}

impl Role {
    fn new(pg: &PgStore) -> Role {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "automaton_pooled_{}_{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let base = test_store().unwrap();
        let mut c = postgres::Client::connect(&base, postgres::NoTls).unwrap();
        c.batch_execute(&format!(
            "CREATE ROLE {name} LOGIN SUPERUSER; ALTER ROLE {name} SET search_path = {}",
            pg.schema
        ))
        .unwrap();
        Role { name, base }
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.base, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP OWNED BY {0}; DROP ROLE {0}", self.name));
        }
    }
}

/// A pgbouncer of the test's own in front of the test's server, listening
/// on a Unix socket in a directory of its own; stopped when dropped.
struct Bouncer {
    child: Child,
    dir: tempfile::TempDir,
    user: String,
}

impl Bouncer {
    /// Starts one in `pool_mode`, with `extra` settings, letting in `user`.
    fn start(pool_mode: &str, extra: &str, user: &str) -> Bouncer {
        let server: postgres::Config = test_store().unwrap().parse().unwrap();
        let port = server.get_ports().first().copied().unwrap_or(5432);
        let (host, socket_dir) = match server.get_hosts().first() {
            Some(postgres::config::Host::Unix(dir)) => (dir.display().to_string(), Some(dir.clone())),
            Some(postgres::config::Host::Tcp(h)) => (h.clone(), None),
            None => (
                "/var/run/postgresql".to_owned(),
                Some(PathBuf::from("/var/run/postgresql")),
            ),
        };
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        std::fs::write(
            dir.path().join("pgbouncer.ini"),
            format!(
                "[databases]\n\
                 * = host={host} port={port}\n\
                 [pgbouncer]\n\
                 listen_addr =\n\
                 listen_port = 6432\n\
                 unix_socket_dir = {d}\n\
                 auth_type = trust\n\
                 auth_file = {d}/users.txt\n\
                 pool_mode = {pool_mode}\n\
                 max_client_conn = 100\n\
                 default_pool_size = 20\n\
                 {extra}"
            ),
        )
        .unwrap();
        std::fs::write(dir.path().join("users.txt"), format!("\"{user}\" \"\"\n")).unwrap();
        let mut cmd = Command::new(PGBOUNCER);
        // pgbouncer will not run as root: it runs as the user who owns
        // the server's socket directory (who may reach the socket).
        if nix::unistd::geteuid().is_root() {
            let uid = socket_dir
                .and_then(|s| std::fs::metadata(s).ok())
                .map(|m| m.uid())
                .filter(|&u| u != 0);
            let name = uid
                .and_then(|u| nix::unistd::User::from_uid(u.into()).ok().flatten())
                .map_or_else(|| "nobody".to_owned(), |u| u.name);
            let owner = nix::unistd::User::from_name(&name).unwrap().unwrap();
            for p in [
                dir.path().to_owned(),
                dir.path().join("pgbouncer.ini"),
                dir.path().join("users.txt"),
            ] {
                nix::unistd::chown(&p, Some(owner.uid), Some(owner.gid)).unwrap();
            }
            cmd.args(["-u", &name]);
        }
        let log = std::fs::File::create(dir.path().join("pgbouncer.log")).unwrap();
        let child = cmd
            .arg(dir.path().join("pgbouncer.ini"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        wait_for(&dir.path().join(".s.PGSQL.6432"));
        Bouncer {
            child,
            dir,
            user: user.to_owned(),
        }
    }

    /// The store's URL through this pgbouncer.
    fn url(&self) -> String {
        format!(
            "postgresql://{}@/postgres?host={}&port=6432",
            self.user,
            self.dir.path().display()
        )
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn through(env: &Env, bouncer: &Bouncer, args: &[&str]) -> Output {
    env.cmd()
        .env("AUTOMATON_STORE", bouncer.url())
        .args(args)
        .output()
        .unwrap()
}

fn ok(env: &Env, bouncer: &Bouncer, args: &[&str]) -> String {
    let out = through(env, bouncer, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn session_pooling_works_and_keeps_the_servers_timeouts() {
    let Some(env) = Env::postgres() else { return };
    if !have_pgbouncer() {
        return;
    }
    let pg = env.pg.as_ref().unwrap();
    let role = Role::new(pg);
    let bouncer = Bouncer::start("session", "", &role.name);

    ok(&env, &bouncer, &["new", "demo", "--step", "echo hello"]);
    let out = ok(&env, &bouncer, &["tick", "demo"]);
    assert!(out.contains("demo tick 1: ran"), "{out}");
    ok(&env, &bouncer, &["approve", "demo", "--ahead"]);
    let status: serde_json::Value =
        serde_json::from_str(&ok(&env, &bouncer, &["status", "demo", "--json"])).unwrap();
    assert_eq!(status["tick"], 1, "{status}");
    // What the commands wrote, read straight from the server.
    let state = env.state("demo");
    assert_eq!(state["tick"], 1);
    assert_eq!(state["pending_approvals"].as_array().unwrap().len(), 1, "{state}");

    // The server gives up a lock wait itself (`lock_timeout`, set for each
    // session once connected), before the client's bound, and says so.
    let mut blocker = pg.client();
    let mut tx = blocker.transaction().unwrap();
    tx.batch_execute("LOCK TABLE loops IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    let out = through(&env, &bouncer, &["pause", "demo", "--timeout", "2s"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("canceling statement due to lock timeout"), "{err}");
    tx.rollback().unwrap();
    assert_eq!(env.state("demo")["status"], "active");

    // A session pgbouncer hands on has been reset (`DISCARD ALL`): the next
    // command is not refused as one sharing another's session.
    let status: serde_json::Value =
        serde_json::from_str(&ok(&env, &bouncer, &["status", "demo", "--json"])).unwrap();
    assert_eq!(status["status"], "active");
}

#[test]
fn transaction_pooling_is_refused_saying_why() {
    refused_behind("transaction", "", true);
}

/// Session pooling whose reset between clients is turned off hands a
/// closed client's session, its advisory locks held, to the next: refused
/// alike.
#[test]
fn session_pooling_without_its_reset_is_refused() {
    refused_behind("session", "server_reset_query =\n", false);
}

/// Commands through a pgbouncer in `pool_mode` are refused, saying why;
/// `first`: the first command through the fresh pool too.
fn refused_behind(pool_mode: &str, extra: &str, first: bool) {
    let Some(env) = Env::postgres() else { return };
    if !have_pgbouncer() {
        return;
    }
    env.new_loop("demo", "step = \"true\"\n");
    let pg = env.pg.as_ref().unwrap();
    let role = Role::new(pg);
    let bouncer = Bouncer::start(pool_mode, extra, &role.name);
    let before = env.state("demo");

    // In transaction pooling the very first command is refused: a second
    // connection it makes while its first is idle is given the first
    // one's session. In session pooling without a reset, a first command
    // keeps its sessions to itself, and the next one is given a session
    // it left, and is refused.
    if !first {
        let out = through(&env, &bouncer, &["list"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    for args in [["list"].as_slice(), &["tick", "demo"]] {
        let out = through(&env, &bouncer, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("still carries another connection's settings")
                && err.contains("transaction or statement pooling mode")
                && err.contains("pool_mode = session")
                && err.contains("\"Poolers\""),
            "{args:?}: {err}"
        );
    }
    let after = env.state("demo");
    assert_eq!(after["tick"], 0, "no tick ran");
    assert_eq!(after["version"], before["version"], "nothing was written");
}
