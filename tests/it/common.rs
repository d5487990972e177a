//! A small builder for tests: a temporary root, loops in it, and the real
//! binary run against it.

#[cfg(unix)]
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use automaton::domain::GateSource;
use automaton::gate::{GateHost, stock_gates};

use tempfile::TempDir;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_automaton");

pub(crate) struct Env {
    _dir: TempDir,
    pub root: PathBuf,
    /// The PostgreSQL store the root's loops live in, when the suite runs
    /// against one (`AUTOMATON_TEST_STORE`).
    pub pg: Option<PgStore>,
}

impl Env {
    /// A fresh, initialised root whose `cache/` is the run's shared gate
    /// cache (see `shared_cache`). With `AUTOMATON_TEST_STORE` set to a
    /// postgres:// URL, its loops live in a schema of their own there.
    pub(crate) fn new() -> Env {
        let env = Env::with_own_cache();
        share_cache(&env.root);
        env
    }

    /// A fresh, initialised root with an empty gate cache of its own, for
    /// tests of the cache itself (its permissions, a first compile).
    pub(crate) fn with_own_cache() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let pg = test_store().map(|url| PgStore::new(&url));
        let env = Env { _dir: dir, root, pg };
        env.ok(&["init"]);
        env.delegate_tester();
        env
    }

    /// A fresh root for a test of the file store's own files (it reads or
    /// writes them by hand), or `None` when the suite runs against
    /// PostgreSQL: the test is then skipped, saying `why` on stderr. Tests
    /// use it through [`files_only!`](crate::files_only).
    pub(crate) fn files_only(why: &str) -> Option<Env> {
        if test_store().is_some() {
            eprintln!("skipped against PostgreSQL: {why}");
            return None;
        }
        Some(Env::new())
    }

    /// A fresh, initialised root in the file store, whichever store the
    /// suite runs against: for tests that move loops between the two.
    pub(crate) fn file() -> Env {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let env = Env {
            _dir: dir,
            root,
            pg: None,
        };
        env.ok(&["init"]);
        env.delegate_tester();
        env
    }

    /// A fresh root whose loops live in PostgreSQL, or `None` (the test is
    /// then skipped, said on stderr) when no server is configured.
    pub(crate) fn postgres() -> Option<Env> {
        let Some(url) = test_store() else {
            skip_without_postgres();
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let env = Env {
            _dir: dir,
            root,
            pg: Some(PgStore::new(&url)),
        };
        env.ok(&["init"]);
        env.delegate_tester();
        share_cache(&env.root);
        Some(env)
    }

    /// Makes the OS user running the suite one of the root's delegates,
    /// listed in its automaton.toml and recorded by its admin (the suite's
    /// user, who owns the root), so that the `AUTOMATON_USER` every
    /// command is given (`operator`, or a test's own) is who acts,
    /// whichever user runs the tests. Tests of identity itself replace the
    /// root's config with [`root_config`](Env::root_config).
    fn delegate_tester(&self) {
        let file = self.root.join("automaton.toml");
        let mut text = std::fs::read_to_string(&file).unwrap_or_default();
        text += &format!("delegates = [{:?}]\n", automaton::who::os_user());
        std::fs::write(&file, text).unwrap();
        self.ok(&["delegate", "add", &automaton::who::os_user()]);
    }

    /// Replaces the root's automaton.toml settings of people (its
    /// `delegates` and `[access]`) with `text`, keeping its `store`; the
    /// suite's user is a recorded delegate only if `text` lists delegates.
    pub(crate) fn root_config(&self, text: &str) {
        let file = self.root.join("automaton.toml");
        let kept: String = std::fs::read_to_string(&file)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("store") || l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&file, kept + text).unwrap();
        let change = if text.contains("delegates") {
            "add"
        } else {
            "remove"
        };
        let _ = self.run(&["delegate", change, &automaton::who::os_user()]);
    }

    /// The binary with `--root` set and a clean environment.
    pub(crate) fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--root").arg(&self.root);
        isolate(&mut c);
        if let Some(pg) = &self.pg {
            c.env("AUTOMATON_STORE", &pg.url);
        }
        c.env("AUTOMATON_USER", "operator")
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    /// Runs and insists on exit 0; returns stdout.
    pub(crate) fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "automaton {args:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs and insists on exit `code`; returns stderr.
    pub(crate) fn fails(&self, code: i32, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "automaton {args:?}: stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stderr).unwrap()
    }

    /// Creates a loop from loop.toml text.
    pub(crate) fn new_loop(&self, name: &str, toml: &str) -> &Env {
        warm_stock_gates(toml);
        let file = self.root.join(format!("{name}.toml"));
        std::fs::write(&file, toml).unwrap();
        self.ok(&["new", name, "--from", file.to_str().unwrap()]);
        std::fs::remove_file(file).unwrap();
        self
    }

    /// Like [`Env::new_loop`], with `new` allowing cadences down to 100ms,
    /// for daemon tests that wait on tenths of seconds.
    pub(crate) fn new_often_loop(&self, name: &str, toml: &str) -> &Env {
        let file = self.root.join(format!("{name}.toml"));
        std::fs::write(&file, toml).unwrap();
        let out = self
            .cmd()
            .env("AUTOMATON_MIN_EVERY", "100ms")
            .args(["new", name, "--from"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        std::fs::remove_file(file).unwrap();
        self
    }

    /// A directory beside the root, made now, that its loops' steps may
    /// write their marks in: a confined step may write nothing of the root
    /// but its run directory, nor make a new entry beside it.
    pub(crate) fn scratch(&self) -> PathBuf {
        let dir = self.root.parent().unwrap().join("scratch");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    pub(crate) fn loop_dir(&self, name: &str) -> PathBuf {
        self.root.join("loops").join(name)
    }

    /// Leaves the loop's lock file as a holder that died leaves it (its
    /// record, naming a process that is gone), for tests that then leave
    /// what a dead writer would have left by hand.
    pub(crate) fn as_if_a_writer_died(&self, name: &str) {
        let record = "{\"pid\":999999999,\"host\":\"gone\",\"command\":\"pause\",\"since\":\"2026-01-01T00:00:00Z\"}\n";
        std::fs::write(self.loop_dir(name).join(".state.lock"), record).unwrap();
    }

    pub(crate) fn state(&self, name: &str) -> serde_json::Value {
        if let Some(pg) = &self.pg {
            return pg.state(name);
        }
        let text = std::fs::read(self.loop_dir(name).join(".state.loop")).unwrap();
        serde_json::from_slice(&text).unwrap()
    }

    /// The committed state as readers see it (`status --json`), the store's
    /// `in_flight` commit included.
    pub(crate) fn status(&self, name: &str) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["status", name, "--json"])).unwrap()
    }

    /// The events of `history.jsonl` (the rows of `events`), with the
    /// refusals kept apart from them merged in, each after the events of
    /// the version it saw, as the store's readers merge them.
    pub(crate) fn history(&self, name: &str) -> Vec<serde_json::Value> {
        if let Some(pg) = &self.pg {
            return pg.history(name);
        }
        let read = |file: &str| -> Vec<serde_json::Value> {
            std::fs::read_to_string(self.loop_dir(name).join(file))
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        let mut refusals = read("refusals.1.jsonl");
        refusals.extend(read("refusals.jsonl"));
        let mut merged = Vec::new();
        let mut refusals = refusals.into_iter().peekable();
        for e in read("history.jsonl") {
            while let Some(r) = refusals.next_if(|r| r["v"].as_u64() < e["v"].as_u64()) {
                merged.push(r);
            }
            merged.push(e);
        }
        merged.extend(refusals);
        merged
    }

    pub(crate) fn history_kinds(&self, name: &str) -> Vec<String> {
        self.history(name)
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// `let env = crate::files_only!("why");` begins a test of the file
/// store's own files: a fresh root, or, against PostgreSQL, a skip that
/// says why and returns from the test.
#[macro_export]
macro_rules! files_only {
    ($why:expr) => {
        match $crate::common::Env::files_only($why) {
            Some(env) => env,
            None => return,
        }
    };
}

/// Every path under `dir`, relative, sorted: to show a command made nothing.
/// A symbolic link is listed, not followed: a root's `cache/` links to the
/// run's shared cache, which other tests fill at the same time.
pub(crate) fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let e = e.unwrap();
            let p = e.path();
            out.push(p.strip_prefix(dir).unwrap().display().to_string());
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Waits until `path` exists; fails the test if it never does. Used to
/// sequence processes on what they did, never on how long they took.
pub(crate) fn wait_for(path: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    while !path.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Waits until process `pid` is gone (or a zombie); false if it outlives
/// the bound.
pub(crate) fn gone(pid: i32) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
        match stat {
            Err(_) => return true,
            Ok(s)
                if s.rsplit(')')
                    .next()
                    .is_some_and(|rest| rest.trim_start().starts_with('Z')) =>
            {
                return true;
            }
            Ok(_) => {}
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A step that says it started, then blocks until the test says go.
pub(crate) fn gated_step(dir: &Path) -> String {
    format!(
        "step = \"touch '{0}/started'; while [ ! -e '{0}/go' ]; do sleep 0.02; done\"\n",
        dir.display()
    )
}

/// A directory with no root in it, for `HOME` and `XDG_DATA_HOME`, so a
/// command run without `--root` never finds the developer's own root.
pub(crate) fn empty_home() -> &'static Path {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("empty-home");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

/// Points a command at `empty_home` and clears the variables that choose a
/// root, a store, a host name, a log level or a table's width.
pub(crate) fn isolate(cmd: &mut Command) -> &mut Command {
    cmd.env("HOME", empty_home())
        .env("XDG_DATA_HOME", empty_home().join(".local/share"))
        .env("XDG_CACHE_HOME", empty_home().join(".cache"))
        .env_remove("AUTOMATON_ROOT")
        .env_remove("AUTOMATON_STORE")
        .env_remove("AUTOMATON_HOST")
        .env_remove("RUST_LOG")
        .env_remove("COLUMNS")
}

/// The PostgreSQL server the suite runs against: `AUTOMATON_TEST_STORE`, a
/// postgres:// URL of a database the tests may create schemas in.
pub(crate) fn test_store() -> Option<String> {
    std::env::var("AUTOMATON_TEST_STORE")
        .ok()
        .filter(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"))
}

/// Says a PostgreSQL test was skipped, or fails it when
/// `AUTOMATON_REQUIRE_POSTGRES=1` (as CI sets).
pub(crate) fn skip_without_postgres() {
    assert!(
        std::env::var("AUTOMATON_REQUIRE_POSTGRES").as_deref() != Ok("1"),
        "AUTOMATON_REQUIRE_POSTGRES=1, but AUTOMATON_TEST_STORE names no postgres:// URL"
    );
    eprintln!("skipped: no PostgreSQL server (set AUTOMATON_TEST_STORE=postgres://...)");
}

/// One test's schema in the test database: its URL (which makes every
/// connection use the schema), and direct reads of what the store wrote.
pub(crate) struct PgStore {
    pub url: String,
    pub schema: String,
    base: String,
}

impl PgStore {
    fn new(base: &str) -> PgStore {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let schema = format!("t_{}_{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst));
        let mut client = postgres::Client::connect(base, postgres::NoTls).unwrap();
        client.batch_execute(&format!("CREATE SCHEMA {schema}")).unwrap();
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
        PgStore {
            url,
            schema,
            base: base.to_owned(),
        }
    }

    pub(crate) fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls).unwrap()
    }

    pub(crate) fn state(&self, name: &str) -> serde_json::Value {
        let row = self
            .client()
            .query_one("SELECT state::text FROM loops WHERE name = $1", &[&name])
            .unwrap();
        serde_json::from_str(&row.get::<_, String>(0)).unwrap()
    }

    pub(crate) fn history(&self, name: &str) -> Vec<serde_json::Value> {
        self.client()
            .query(
                "SELECT event::text FROM (
                     SELECT v, n AS o, false AS refusal, event FROM events WHERE loop = $1
                     UNION ALL
                     SELECT v, seq, true, event FROM refusals WHERE loop = $1) h
                 ORDER BY v, refusal, o",
                &[&name],
            )
            .unwrap()
            .iter()
            .map(|r| serde_json::from_str(&r.get::<_, String>(0)).unwrap())
            .collect()
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.base, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP SCHEMA {} CASCADE", self.schema));
        }
    }
}

/// The gate cache every test root shares: a root's `cache/` is a
/// symbolic link to it, so a gate is compiled once per run of the test
/// binary rather than once per root. The product's checks all still apply:
/// the link is followed like any path, the directory is this user's and
/// private, and each entry is sealed with the directory's own key to the
/// file written (copying entries into each root would break those seals,
/// so they would be compiled again). Loops of many roots sharing it are
/// like many loops of one root.
///
/// One directory per process, under the target directory, so a run never
/// sees an older build's artefacts and two runs side by side do not share
/// one; those of processes that have ended are removed.
pub(crate) fn shared_cache() -> &'static Path {
    static CACHE: OnceLock<PathBuf> = OnceLock::new();
    CACHE.get_or_init(|| {
        let parent = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gate-cache");
        std::fs::create_dir_all(&parent).unwrap();
        for e in std::fs::read_dir(&parent).unwrap() {
            let path = e.unwrap().path();
            let pid = path.file_name().and_then(|n| n.to_str()?.parse::<i32>().ok());
            #[cfg(unix)]
            let ended = pid.is_some_and(|pid| {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH)
            });
            // Windows: a cache is removed only by the process it is named by.
            #[cfg(windows)]
            let ended = false;
            if ended || pid == Some(std::process::id() as i32) {
                match std::fs::remove_dir_all(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        panic!("{}: {e}", path.display())
                    }
                    _ => {}
                }
            }
        }
        let dir = parent.join(std::process::id().to_string());
        #[cfg(unix)]
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
        #[cfg(windows)]
        std::fs::create_dir(&dir).unwrap();
        dir
    })
}

/// Replaces `root`'s own (empty) `cache/` with a link to `shared_cache`.
/// Windows: each root keeps its own cache (a link to a shared one would
/// need the privilege to make symbolic links).
pub(crate) fn share_cache(root: &Path) {
    #[cfg(unix)]
    link_cache(root, shared_cache());
    #[cfg(windows)]
    let _ = root;
}

/// Replaces `root`'s own (empty) `cache/` with a link to `dir`.
#[cfg(unix)]
pub(crate) fn link_cache(root: &Path, dir: &Path) {
    let cache = root.join("cache");
    std::fs::remove_dir(&cache).unwrap();
    std::os::unix::fs::symlink(dir, &cache).unwrap();
}

/// Compiles the stock gates a loop.toml names into `shared_cache`, each
/// once per run, before the loop is made: tests that start at once then
/// never race to compile the same gate (which would only cost a second
/// compile, but says so on stderr).
pub(crate) fn warm_stock_gates(loop_toml: &str) {
    // Windows: no shared cache to warm (see `share_cache`).
    if cfg!(windows) {
        return;
    }
    let Ok(config) = loop_toml.parse::<toml::Table>() else {
        return;
    };
    let names = config
        .get("gate")
        .and_then(|g| g.as_array())
        .into_iter()
        .flatten()
        .filter_map(|g| g.get("stock")?.as_str());
    for name in names {
        warm_stock_gate(name);
    }
}

/// Compiles one stock gate into `shared_cache`, once per run.
pub(crate) fn warm_stock_gate(name: &str) {
    static WARM: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut warm = WARM.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if warm.iter().any(|w| w == name) || !stock_gates().iter().any(|g| g.name == name) {
        return;
    }
    let host = GateHost::new(Some(shared_cache().to_path_buf())).unwrap();
    host.load(&GateSource::Stock(name.into())).unwrap();
    warm.push(name.to_owned());
}
