//! What `/proc` says of a process: its parent, its process group, when it
//! started (clock ticks since boot, field 22 of `/proc/<pid>/stat`) and
//! which program it runs; and which boot this is. Where there is no
//! `/proc` (macOS), every answer is `None`: nothing is proved there.

#[cfg(unix)]
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::state::ProcessStart;

/// A process as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stat {
    /// Its name (`comm`), at most 15 bytes.
    pub comm: String,
    pub ppid: i32,
    /// The process group it is in.
    pub pgrp: i32,
    /// When it started, in clock ticks since boot.
    pub start: u64,
}

/// What `/proc/<pid>/stat` says; `None` when there is no such process (or
/// no `/proc`).
pub(crate) fn stat(pid: i32) -> Option<Stat> {
    if pid <= 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses `pid (comm) state ppid pgrp ...`; `comm` may hold spaces and
/// parentheses, so it ends at the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let (head, rest) = text.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_owned();
    // Fields from the third (state) on: ppid is the 4th, pgrp the 5th,
    // starttime the 22nd.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        comm,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// This boot of this machine: the kernel's
/// `/proc/sys/kernel/random/boot_id`, read once.
pub(crate) fn boot_id() -> Option<&'static str> {
    static ID: OnceLock<Option<String>> = OnceLock::new();
    ID.get_or_init(|| {
        let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let id = id.trim();
        (!id.is_empty() && id.len() <= 64).then(|| id.to_owned())
    })
    .as_deref()
}

/// This machine's id (`/etc/machine-id`, else `/var/lib/dbus/machine-id`),
/// which two machines given one host name do not share.
pub(crate) fn machine_id() -> Option<&'static str> {
    static ID: OnceLock<Option<String>> = OnceLock::new();
    ID.get_or_init(|| {
        ["/etc/machine-id", "/var/lib/dbus/machine-id"]
            .iter()
            .find_map(|p| {
                let id = std::fs::read_to_string(p).ok()?;
                let id = id.trim();
                (!id.is_empty() && id.len() <= 64 && !id.contains(' ')).then(|| id.to_owned())
            })
    })
    .as_deref()
}

/// The PID namespace this process sees pids in (`/proc/self/ns/pid`'s
/// target, `pid:[4026531836]`): a pid means the same process only to
/// processes of the same namespace.
pub(crate) fn pid_namespace() -> Option<&'static str> {
    static NS: OnceLock<Option<String>> = OnceLock::new();
    NS.get_or_init(|| {
        let ns = std::fs::read_link("/proc/self/ns/pid").ok()?;
        let ns = ns.to_str()?;
        (!ns.is_empty() && ns.len() <= 64 && !ns.contains(' ')).then(|| ns.to_owned())
    })
    .as_deref()
}

/// When process `pid` started, on this boot: what the tick records of its
/// step's group leader so that `cancel` can tell it from any other.
pub(crate) fn start_of(pid: i32) -> Option<ProcessStart> {
    Some(ProcessStart {
        ticks: stat(pid)?.start,
        boot: boot_id()?.to_owned(),
    })
}

/// The program process `pid` runs (`/proc/<pid>/exe`); `None` when it is
/// gone or not ours to look at.
#[cfg(unix)]
pub(crate) fn exe(pid: i32) -> Option<PathBuf> {
    if pid <= 0 {
        return None;
    }
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// The first word of process `pid`'s command line (its `argv[0]`): how a
/// guard is told where its executable cannot be compared.
#[cfg(all(unix, not(all(target_os = "linux", target_arch = "x86_64"))))]
pub(crate) fn argv0(pid: i32) -> Option<Vec<u8>> {
    let line = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(line.split(|b| *b == 0).next()?.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_spaces_and_parentheses_is_read_to_its_last_parenthesis() {
        let line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.comm, "a (b) c");
        assert_eq!((s.ppid, s.pgrp, s.start), (17, 4242, 987654));
        assert!(parse_stat("4242 (x) S 1").is_none());
    }

    #[cfg(unix)]
    #[test]
    fn this_process_is_seen_as_it_is() {
        let me = std::process::id() as i32;
        let s = stat(me).unwrap();
        assert_eq!(s.ppid as u32, std::os::unix::process::parent_id());
        assert_eq!(s.pgrp, nix::unistd::getpgrp().as_raw());
        assert_eq!(start_of(me).unwrap().ticks, s.start);
        assert_eq!(exe(me).unwrap(), std::env::current_exe().unwrap());
        assert!(stat(0).is_none());
    }
}
