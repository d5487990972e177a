//! A network namespace of a test's own, joined to the host by a veth pair
//! on a /30 of 10.201.0.0/16: a process run in it reaches the host only
//! over that link, which the test can cut (the host's end set down:
//! packets then vanish, no reset is sent). Each namespace claims its /30
//! by creating its veth pair, whose names are unique on the host, so tests
//! running at once (in one run or several) never share one. The
//! namespace, its link and whatever still runs in it are removed on drop,
//! whatever the test did.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// How many /30s of 10.201.0.0/16 there are to claim.
const NETS: u32 = 1 << 14;

pub(crate) struct NetNs {
    name: String,
    /// The host's end of the veth pair.
    host_dev: String,
    /// Which /30 of 10.201.0.0/16.
    net: u32,
}

/// Runs `ip ARGS`; its stderr when it failed.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl NetNs {
    /// A namespace with its link up, or `None` (skipped, said on stderr)
    /// when the tests do not run as root or have no `ip` (iproute2),
    /// unless `AUTOMATON_REQUIRE_USERS=1` (as CI sets when it runs as
    /// root) makes that a failure.
    pub(crate) fn new() -> Option<NetNs> {
        let why = if !nix::unistd::geteuid().is_root() {
            Some("a network namespace needs root")
        } else if Command::new("ip").arg("-V").output().is_err() {
            Some("a network namespace needs ip (iproute2)")
        } else {
            None
        };
        if let Some(why) = why {
            assert!(
                std::env::var("AUTOMATON_REQUIRE_USERS").as_deref() != Ok("1"),
                "AUTOMATON_REQUIRE_USERS=1, but {why}"
            );
            eprintln!("skipped: {why}");
            return None;
        }
        let first = std::process::id() % NETS;
        for net in (0..64).map(|i| (first + i) % NETS) {
            let host_dev = format!("atm{net}h");
            let peer = format!("atm{net}n");
            // Fails when another test (or one that died) has this /30.
            if ip(&["link", "add", &host_dev, "type", "veth", "peer", "name", &peer]).is_err() {
                continue;
            }
            let ns = NetNs {
                name: format!("automaton-{net}"),
                host_dev,
                net,
            };
            if ip(&["netns", "add", &ns.name]).is_err() {
                let _ = ip(&["link", "del", &ns.host_dev]);
                continue;
            }
            ns.link_up(&peer).unwrap();
            return Some(ns);
        }
        panic!("no /30 of 10.201.0.0/16 is free for a network namespace");
    }

    fn link_up(&self, peer: &str) -> Result<(), String> {
        let (host, inside) = (format!("{}/30", self.host_addr()), format!("{}/30", self.addr()));
        ip(&["link", "set", peer, "netns", &self.name])?;
        ip(&["addr", "add", &host, "dev", &self.host_dev])?;
        ip(&["link", "set", &self.host_dev, "up"])?;
        ip(&["-n", &self.name, "addr", "add", &inside, "dev", peer])?;
        ip(&["-n", &self.name, "link", "set", peer, "up"])?;
        ip(&["-n", &self.name, "link", "set", "lo", "up"])
    }

    fn octets(&self, host: u32) -> Ipv4Addr {
        let low = self.net * 4 + host;
        Ipv4Addr::new(10, 201, (low >> 8) as u8, low as u8)
    }

    /// The link's network, `a.b.c.d/30`.
    pub(crate) fn network(&self) -> String {
        format!("{}/30", self.octets(0))
    }

    /// The host's address on the link.
    pub(crate) fn host_addr(&self) -> Ipv4Addr {
        self.octets(1)
    }

    /// The namespace's address on the link.
    pub(crate) fn addr(&self) -> Ipv4Addr {
        self.octets(2)
    }

    /// `program` to be run in the namespace.
    pub(crate) fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Cuts the link (`false`) or restores it: the host's end is set down,
    /// so what either side sends over it is dropped, unanswered.
    pub(crate) fn link(&self, up: bool) {
        ip(&["link", "set", &self.host_dev, if up { "up" } else { "down" }]).unwrap();
    }

    /// The processes running in the namespace.
    pub(crate) fn pids(&self) -> Vec<i32> {
        let out = Command::new("ip")
            .args(["netns", "pids", &self.name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        for pid in self.pids() {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
        // The pair goes with either end.
        let _ = ip(&["link", "del", &self.host_dev]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}
