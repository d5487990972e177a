//! Windows: the runner's guarantees the Windows way, driven through the
//! Windows binary (under Wine in CI): a tick with a stock gate, approval,
//! pause and resume, the lock readable while a tick holds it, a step's job
//! killed with its runner, a timeout that ends a tree of processes, the
//! owner-only ACLs of what a root holds, and the daemon as a service.
//!
//! Steps are batch files run by `cmd`. A process of a step's tree holds a
//! file open (its output redirected into it) for as long as it lives, and
//! Windows refuses to delete a file a process holds: a file that can be
//! deleted proves the process that held it is gone. (Wine 8 lets such a
//! file be deleted, so under Wine that proof is weaker than on Windows:
//! the processes of a step's tree are also looked for, by pid, in the
//! system's process list.)

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Env, wait_for};

/// A batch file in `dir`, for a step to run.
fn batch(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("@echo off\r\n{}\r\n", body.replace('\n', "\r\n"))).unwrap();
    path
}

/// loop.toml's `[step]` running the batch file `path`, unconfined (Windows
/// has no confinement automaton applies; its job is what holds the step).
/// The table comes last: a `[[gate]]` may follow it.
fn step_table(path: &Path) -> String {
    format!(
        "[step]\ncommand = [\"cmd\", \"/C\", {:?}]\nconfine = \"off\"\n",
        path.display().to_string()
    )
}

/// A command that holds `file` open (its output) for a long while.
fn holding(file: &Path) -> String {
    format!("ping -n 100000 127.0.0.1 > \"{}\"", file.display())
}

/// Waits until `file` can be deleted (no process holds it any more), for
/// at most half a minute; false if it never can.
fn released(file: &Path) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match std::fs::remove_file(file) {
            Ok(()) => return true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
            Err(_) if Instant::now() > deadline => return false,
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn tick(env: &Env, name: &str) -> serde_json::Value {
    let out = env.run(&["tick", name, "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "tick {name}: {e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn spawn_tick(env: &Env, name: &str) -> Child {
    env.cmd()
        .args(["tick", name, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_tick_runs_its_step_behind_a_stock_gate_and_waits_for_approval() {
    let env = Env::new();
    let dir = env.scratch();
    let step = batch(&dir, "hello.cmd", "echo hello from windows");
    env.new_loop(
        "demo",
        &format!(
            "{}[[gate]]\nstock = \"approve-every\"\nparams = {{ every = 1 }}\n",
            step_table(&step)
        ),
    );
    let v = tick(&env, "demo");
    assert_eq!(v["outcome"], "ran", "{v}");
    assert_eq!(v["step"]["exit_code"], 0, "{v}");
    let logs = env.ok(&["logs", "demo"]);
    assert!(logs.contains("hello from windows"), "{logs}");
    assert_eq!(tick(&env, "demo")["outcome"], "awaiting-approval");
    env.ok(&["approve", "demo"]);
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
}

#[test]
fn a_paused_loop_runs_no_step_until_resumed() {
    let env = Env::new();
    let dir = env.scratch();
    let mark = dir.join("ran");
    let step = batch(&dir, "mark.cmd", &format!("echo ran>> \"{}\"", mark.display()));
    env.new_loop("demo", &step_table(&step));
    env.ok(&["pause", "demo"]);
    assert_eq!(env.status("demo")["status"], "paused");
    let _ = env.run(&["tick", "demo"]);
    assert!(!mark.exists(), "a paused loop ran its step");
    env.ok(&["resume", "demo"]);
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    assert_eq!(std::fs::read_to_string(&mark).unwrap().lines().count(), 1);
}

#[test]
fn status_names_the_tick_that_holds_the_lock() {
    let env = Env::new();
    let dir = env.scratch();
    let (started, go) = (dir.join("started"), dir.join("go"));
    let step = batch(
        &dir,
        "wait.cmd",
        &format!(
            "echo.> \"{0}\"\n:wait\nif exist \"{1}\" exit /b 0\nping -n 2 127.0.0.1 > nul\ngoto wait",
            started.display(),
            go.display()
        ),
    );
    env.new_loop("demo", &step_table(&step));
    let child = spawn_tick(&env, "demo");
    wait_for(&started);
    // The tick holds the lock: its holder record is read, not blocked on.
    let v = env.status("demo");
    assert_eq!(v["lock"]["command"], "tick", "{v}");
    assert_eq!(v["lock"]["pid"], child.id(), "{v}");
    let err = env.fails(4, &["pause", "demo", "--no-wait"]);
    assert!(err.contains("tick"), "{err}");
    std::fs::write(&go, "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(env.status("demo")["lock"].is_null());
}

/// A step that holds `held` open the first time it runs, and ends at
/// once after that (`mark` says it ran).
fn holding_once(mark: &Path, held: &Path) -> String {
    format!(
        "if exist \"{0}\" exit /b 0\necho.> \"{0}\"\n{1}",
        mark.display(),
        holding(held)
    )
}

#[test]
fn a_step_dies_with_its_runner() {
    let env = Env::new();
    let dir = env.scratch();
    let (mark, held) = (dir.join("ran"), dir.join("held.log"));
    let step = batch(&dir, "hold.cmd", &holding_once(&mark, &held));
    env.new_loop("demo", &step_table(&step));
    let mut child = spawn_tick(&env, "demo");
    wait_for(&held);
    // cmd makes the file, then starts ping into it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut tree = processes::descendants(child.id());
    while tree.len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        tree = processes::descendants(child.id());
    }
    if tree.len() < 2 {
        child.kill().unwrap();
        panic!("the step's cmd and ping never ran: {tree:?}");
    }
    // TerminateProcess: the runner gets no say, its job's handle closes.
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while processes::any_of(&tree) {
        assert!(
            Instant::now() < deadline,
            "the step outlived its runner: {tree:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(released(&held), "the step outlived its runner");
    // The next tick records the one that died (its step ends at once).
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    assert!(env.history_kinds("demo").contains(&"crashed".to_owned()));
}

/// The processes running now, by Toolhelp's snapshot.
mod processes {
    use windows_sys::Win32::Foundation::{CloseHandle, INVALID_HANDLE_VALUE};
    use windows_sys::Win32::System::Diagnostics::ToolHelp::{
        CreateToolhelp32Snapshot, PROCESSENTRY32W, Process32FirstW, Process32NextW, TH32CS_SNAPPROCESS,
    };

    /// Every running process as (pid, parent pid).
    fn all() -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        // SAFETY: a snapshot handle we own and close; the entry is sized.
        unsafe {
            let snap = CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0);
            assert_ne!(snap, INVALID_HANDLE_VALUE, "{}", std::io::Error::last_os_error());
            let mut entry: PROCESSENTRY32W = std::mem::zeroed();
            entry.dwSize = u32::try_from(std::mem::size_of::<PROCESSENTRY32W>()).unwrap();
            let mut more = Process32FirstW(snap, &raw mut entry) != 0;
            while more {
                out.push((entry.th32ProcessID, entry.th32ParentProcessID));
                more = Process32NextW(snap, &raw mut entry) != 0;
            }
            CloseHandle(snap);
        }
        out
    }

    /// The processes descended from `pid`, running now.
    pub(super) fn descendants(pid: u32) -> Vec<u32> {
        let all = all();
        let mut found = vec![pid];
        let mut i = 0;
        while i < found.len() {
            let parent = found[i];
            found.extend(
                all.iter()
                    .filter(|(p, pp)| *pp == parent && !found.contains(p))
                    .map(|(p, _)| *p)
                    .collect::<Vec<_>>(),
            );
            i += 1;
        }
        found.remove(0);
        found
    }

    /// Whether any of `pids` still runs.
    pub(super) fn any_of(pids: &[u32]) -> bool {
        all().iter().any(|(p, _)| pids.contains(p))
    }
}

#[test]
fn a_timeout_ends_the_whole_tree() {
    let env = Env::new();
    let dir = env.scratch();
    let (a, b) = (dir.join("a.log"), dir.join("b.log"));
    let grandchild = batch(&dir, "b.cmd", &holding(&b));
    // The step starts b's tree, waits for it, then holds a itself.
    let step = batch(
        &dir,
        "tree.cmd",
        &format!(
            "start /b cmd /C \"{}\"\n:wait\nif not exist \"{}\" (ping -n 2 127.0.0.1 > nul & goto wait)\n{}",
            grandchild.display(),
            b.display(),
            holding(&a)
        ),
    );
    // Long enough for cmd to start the whole tree on a loaded machine
    // (under Wine, with the other tests running, that took over 10s).
    env.new_loop("demo", &format!("timeout = \"30s\"\n{}", step_table(&step)));
    let child = spawn_tick(&env, "demo");
    wait_for(&a);
    // cmd makes a.log, then starts ping into it.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut tree = processes::descendants(child.id());
    while tree.len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        tree = processes::descendants(child.id());
    }
    let out = child.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["outcome"], "failed", "{v}");
    assert_eq!(v["step"]["timed_out"], true, "{v}");
    // The step's cmd and a's ping (b's cmd is started by `start`, which
    // exits: b's branch descends from no process left, and is proved gone
    // by its file alone).
    assert!(tree.len() >= 2, "the step's cmd and ping: {tree:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while processes::any_of(&tree) {
        assert!(
            Instant::now() < deadline,
            "a process of the tree survived: {tree:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for file in [&a, &b] {
        assert!(released(file), "a process holding {} survived", file.display());
    }
}

#[test]
fn a_hostile_gate_is_stopped_and_its_step_never_runs() {
    use crate::gate_fixtures as fx;
    let env = Env::new();
    let dir = env.scratch();
    let mark = dir.join("ran");
    let step = batch(&dir, "mark.cmd", &format!("echo ran>> \"{}\"", mark.display()));
    env.new_loop(
        "spin",
        &format!(
            "{}[[gate]]\npath = \"gates/spin.wasm\"\non_error = \"skip\"\nlimits = {{ timeout = \"200ms\" }}\n\
             [[gate]]\npath = \"gates/bomb.wasm\"\non_error = \"skip\"\nlimits = {{ memory = \"16MiB\" }}\n",
            step_table(&step)
        ),
    );
    let gates = env.loop_dir("spin").join("gates");
    std::fs::create_dir_all(&gates).unwrap();
    std::fs::write(gates.join("spin.wasm"), fx::infinite_loop()).unwrap();
    std::fs::write(gates.join("bomb.wasm"), fx::memory_bomb()).unwrap();
    let v = tick(&env, "spin");
    let error = v["decisions"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("timed out after 200ms"), "{v}");
    assert!(!mark.exists(), "the step ran behind a gate that never answered");
}

/// Every file and directory automaton made in a root (its state, history,
/// lock, runs and their logs, budgets' ledger and lock, users, the gate
/// cache and its key) is its owner's alone, as Unix makes them 0600 and
/// 0700: its DACL, read back, allows its owner and nobody else, and is
/// protected from what its directory would pass on. Wine keeps no ACL of
/// its own (it maps one to the file's Unix mode and back): it shows the
/// owner and SYSTEM, and anyone else only when the mode lets others in,
/// and never a protected DACL, so under Wine SYSTEM is accepted and the
/// protection is not checked.
#[test]
fn private_files_grant_their_owner_alone() {
    let env = Env::with_own_cache();
    let file = env.root.join("automaton.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text + "\n[[budget]]\nname = \"daily\"\nwindow = \"1d\"\ncap = 10.0\nscope = \"group:agents\"\n",
    )
    .unwrap();
    let dir = env.scratch();
    let step = batch(&dir, "cost.cmd", "echo cost_usd=1 > \"%AUTOMATON_METRICS%\"");
    env.new_loop(
        "demo",
        &format!(
            "group = \"agents\"\nmax_per_tick = 1.0\n{}[[gate]]\nstock = \"approve-every\"\nparams = {{ every = 1 }}\n",
            step_table(&step)
        ),
    );
    assert_eq!(tick(&env, "demo")["outcome"], "ran");
    assert_eq!(tick(&env, "demo")["outcome"], "awaiting-approval");
    env.ok(&["approve", "demo"]);
    env.ok(&["pause", "demo"]);
    let mut seen = Vec::new();
    let mut todo = vec![env.root.clone()];
    while let Some(path) = todo.pop() {
        if path.is_dir() {
            todo.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
        // The suite writes automaton.toml itself (its delegates, the
        // budget above), the step its metrics: not files automaton made
        // (on Windows the step's inherits its run directory's ACL).
        if path == file || path.file_name().is_some_and(|n| n == "metrics") {
            continue;
        }
        if let Err(why) = acl::owner_only(&path) {
            panic!("{}: {why}", path.display());
        }
        seen.push(
            path.strip_prefix(&env.root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/"),
        );
    }
    for made in [
        "loops/demo/.state.loop",
        "loops/demo/history.jsonl",
        "loops/demo/.state.lock",
        "budgets/ledger.json",
        "budgets/ledger.lock",
        "cache/gates/key",
        "admin.jsonl",
    ] {
        assert!(seen.iter().any(|p| p == made), "{made} was not made: {seen:?}");
    }
    for kind in ["runs/1", ".cwasm"] {
        assert!(
            seen.iter().any(|p| p.contains(kind)),
            "nothing under {kind}: {seen:?}"
        );
    }
}

/// Reading a file's DACL back.
mod acl {
    use std::os::windows::fs::OpenOptionsExt;
    use std::os::windows::io::AsRawHandle;
    use std::path::Path;

    use windows_sys::Win32::Foundation::{CloseHandle, ERROR_SUCCESS, HANDLE, LocalFree};
    use windows_sys::Win32::Security::Authorization::{GetSecurityInfo, SE_FILE_OBJECT};
    use windows_sys::Win32::Security::{
        ACCESS_ALLOWED_ACE, ACE_HEADER, ACL, DACL_SECURITY_INFORMATION, EqualSid, GetAce,
        GetSecurityDescriptorControl, GetTokenInformation, IsWellKnownSid, PSECURITY_DESCRIPTOR,
        SE_DACL_PROTECTED, TOKEN_QUERY, TOKEN_USER, TokenUser, WinLocalSystemSid,
    };
    use windows_sys::Win32::Storage::FileSystem::{
        FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT, READ_CONTROL,
    };
    use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

    /// `ACCESS_ALLOWED_ACE_TYPE`.
    const ALLOWED: u8 = 0;

    /// Whether this runs under Wine (whose runner sets `WINEPREFIX`, which
    /// Wine passes on to the programs it runs).
    fn wine() -> bool {
        std::env::var_os("WINEPREFIX").is_some()
    }

    /// `Ok` when `path`'s DACL allows its owner alone (see the test).
    pub(super) fn owner_only(path: &Path) -> Result<(), String> {
        let file = std::fs::OpenOptions::new()
            .access_mode(READ_CONTROL)
            .custom_flags(FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT)
            .open(path)
            .map_err(|e| format!("opening it to read its ACL: {e}"))?;
        let user = current_user();
        // SAFETY: an open handle; the descriptor GetSecurityInfo allocates
        // (which `dacl` points into) is read, then freed.
        unsafe {
            let sid = (*user.as_ptr().cast::<TOKEN_USER>()).User.Sid;
            let mut dacl: *mut ACL = std::ptr::null_mut();
            let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
            let rc = GetSecurityInfo(
                file.as_raw_handle(),
                SE_FILE_OBJECT,
                DACL_SECURITY_INFORMATION,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &raw mut dacl,
                std::ptr::null_mut(),
                &raw mut sd,
            );
            if rc != ERROR_SUCCESS {
                return Err(format!("GetSecurityInfo: error {rc}"));
            }
            let verdict = check(sd, dacl, sid);
            LocalFree(sd);
            verdict
        }
    }

    /// # Safety
    /// `sd` is a security descriptor and `dacl` its DACL (or null).
    unsafe fn check(
        sd: PSECURITY_DESCRIPTOR,
        dacl: *const ACL,
        me: *mut core::ffi::c_void,
    ) -> Result<(), String> {
        if dacl.is_null() {
            return Err("no DACL: everyone may do anything".to_owned());
        }
        // SAFETY: the caller's.
        unsafe {
            let (mut control, mut revision) = (0u16, 0u32);
            GetSecurityDescriptorControl(sd, &raw mut control, &raw mut revision);
            if control & SE_DACL_PROTECTED == 0 && !wine() {
                return Err("its DACL is not protected from inheritance".to_owned());
            }
            let mut owner = false;
            for i in 0..u32::from((*dacl).AceCount) {
                let mut ace: *mut core::ffi::c_void = std::ptr::null_mut();
                if GetAce(dacl, i, &raw mut ace) == 0 {
                    return Err(format!("ACE {i} unreadable"));
                }
                let header = &*ace.cast::<ACE_HEADER>();
                if header.AceType != ALLOWED {
                    continue; // a denial takes nothing from the owner-only rule
                }
                let allowed = ace.cast::<ACCESS_ALLOWED_ACE>();
                let sid = (&raw const (*allowed).SidStart).cast_mut().cast();
                if EqualSid(sid, me) != 0 {
                    owner = true;
                } else if !(wine() && IsWellKnownSid(sid, WinLocalSystemSid) != 0) {
                    return Err(format!(
                        "its DACL allows another (ACE {i}, mask {:#x})",
                        (*allowed).Mask
                    ));
                }
            }
            if owner {
                Ok(())
            } else {
                Err("its DACL does not allow its owner".to_owned())
            }
        }
    }

    /// This process's token's user, as `TOKEN_USER` in a buffer.
    fn current_user() -> Vec<u64> {
        // SAFETY: a token handle we own and close; the buffer is as long
        // as the first call says.
        unsafe {
            let mut token: HANDLE = std::ptr::null_mut();
            assert_ne!(
                OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &raw mut token),
                0
            );
            let mut len = 0u32;
            GetTokenInformation(token, TokenUser, std::ptr::null_mut(), 0, &raw mut len);
            let mut buf = vec![0u64; (len as usize).div_ceil(8).max(1)];
            let ok = GetTokenInformation(token, TokenUser, buf.as_mut_ptr().cast(), len, &raw mut len);
            CloseHandle(token);
            assert_ne!(ok, 0);
            buf
        }
    }
}

/// `sc.exe`, run to the end; its output.
fn sc(args: &[&str]) -> String {
    let out = std::process::Command::new("sc.exe").args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "sc.exe {args:?}: {text}");
    text
}

/// A service registered for a test, stopped and deleted however it ends.
struct Service(String);

impl Drop for Service {
    fn drop(&mut self) {
        for verb in ["stop", "delete"] {
            let _ = std::process::Command::new("sc.exe")
                .args([verb, &self.0])
                .output();
        }
    }
}

/// The daemon as a Windows service: `sc.exe create` registers it, `sc.exe
/// start` starts it and it ticks a scheduled loop; `sc.exe stop` stops it
/// as Ctrl-Break does, a running tick finishing within the grace: the
/// service reports STOPPED, the tick is recorded whole, and the daemon's
/// record says none serves the root any more.
#[test]
fn the_daemon_runs_as_a_service_and_stops_when_told() {
    let env = Env::new();
    let dir = env.scratch();
    let (started, go) = (dir.join("started"), dir.join("go"));
    // The first tick waits for `go`, which the test gives once the stop
    // was asked for: the stop finds a tick running.
    let step = batch(
        &dir,
        "wait.cmd",
        &format!(
            "if exist \"{0}\" exit /b 0\necho.> \"{0}\"\n:wait\nif exist \"{1}\" exit /b 0\nping -n 2 127.0.0.1 > nul\ngoto wait",
            started.display(),
            go.display()
        ),
    );
    env.new_often_loop(
        "demo",
        &format!("[schedule]\nevery = \"1s\"\n{}", step_table(&step)),
    );
    let service = Service(format!("automaton-test-{}", std::process::id()));
    let command = format!(
        "\"{}\" --root \"{}\" daemon --service --grace 60s",
        crate::common::BIN,
        env.root.display()
    );
    sc(&["create", &service.0, "binPath=", &command]);
    sc(&["start", &service.0]);
    wait_for(&started);
    // The daemon publishes its record every few seconds.
    let deadline = Instant::now() + Duration::from_mins(1);
    while !env.run(&["daemon", "--status"]).status.success() {
        assert!(Instant::now() < deadline, "no daemon serves the root");
        std::thread::sleep(Duration::from_millis(200));
    }
    sc(&["stop", &service.0]);
    std::fs::write(&go, "").unwrap();
    let deadline = Instant::now() + Duration::from_mins(1);
    loop {
        let state = sc(&["query", &service.0]);
        if state.contains("STOPPED") {
            break;
        }
        assert!(Instant::now() < deadline, "the service never stopped: {state}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let kinds = env.history_kinds("demo");
    assert!(kinds.contains(&"tick".to_owned()), "{kinds:?}");
    assert!(!kinds.contains(&"crashed".to_owned()), "{kinds:?}");
    assert_eq!(env.run(&["daemon", "--status"]).status.code(), Some(1));
}
