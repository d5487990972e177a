//! How many connections the server holds, so a flood of idle ones from
//! one client neither runs the process out of descriptors nor keeps
//! others out: the descriptor limit raised to its hard limit at start
//! (systemd's default soft limit is 1,024), at most [`PER_ADDRESS`]
//! connections from one address and [`TOTAL`] in all (fewer when the
//! descriptors are fewer). A connection past either is closed as soon as
//! it is accepted, before anything is read. A Unix socket's peers have
//! no address: only the total counts them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The most connections held from one address.
pub(super) const PER_ADDRESS: usize = 512;

/// The most connections held in all, when the descriptors allow.
pub(super) const TOTAL: usize = 4096;

/// Descriptors kept for what is not a connection: the store's files,
/// the runtime, git and gates run for a request.
const RESERVED: u64 = 128;

/// The connections held, by address.
pub(super) struct Conns {
    held: Mutex<Held>,
    total: usize,
}

#[derive(Default)]
struct Held {
    by_address: HashMap<IpAddr, usize>,
    all: usize,
}

/// One connection admitted; it is counted until this is dropped.
pub(super) struct Slot {
    conns: Arc<Conns>,
    address: Option<IpAddr>,
}

impl Conns {
    /// The counts for a server whose process may hold `descriptors` files.
    pub(super) fn new(descriptors: u64) -> Arc<Conns> {
        let room = descriptors.saturating_sub(RESERVED).max(16);
        Arc::new(Conns {
            held: Mutex::default(),
            total: TOTAL.min(usize::try_from(room).unwrap_or(TOTAL)),
        })
    }

    /// Admits a connection from `address` (none: a Unix socket's peer),
    /// unless it would pass a limit.
    pub(super) fn admit(self: &Arc<Self>, address: Option<IpAddr>) -> Option<Slot> {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.all >= self.total {
            return None;
        }
        if let Some(a) = address {
            let from = held.by_address.entry(a).or_default();
            if *from >= PER_ADDRESS {
                return None;
            }
            *from += 1;
        }
        held.all += 1;
        Some(Slot {
            conns: Arc::clone(self),
            address,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self
            .conns
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        held.all -= 1;
        if let Some(a) = self.address
            && let Some(from) = held.by_address.get_mut(&a)
        {
            *from -= 1;
            if *from == 0 {
                held.by_address.remove(&a);
            }
        }
    }
}

/// The soft limit on open files in force.
#[cfg(windows)]
pub(super) fn descriptor_limit() -> u64 {
    WINDOWS_SOCKETS
}

/// Windows has no limit on open files to raise: sockets are handles,
/// bounded by memory; this many are counted on.
#[cfg(windows)]
const WINDOWS_SOCKETS: u64 = 16 * 1024;

#[cfg(windows)]
pub(super) fn raise_descriptor_limit() -> u64 {
    WINDOWS_SOCKETS
}

#[cfg(unix)]
pub(super) fn descriptor_limit() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(1024, |(soft, _)| soft)
}

/// Raises the soft limit on open files to the hard limit, before the
/// server listens; the soft limit in force after.
#[cfg(unix)]
pub(super) fn raise_descriptor_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft >= hard {
        return soft;
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => {
            tracing::debug!("open files: limit raised from {soft} to {hard}");
            hard
        }
        Err(e) => {
            tracing::warn!("cannot raise the open files limit from {soft} to {hard}: {e}");
            soft
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_is_capped_and_a_closed_connection_frees_its_slot() {
        let conns = Conns::new(100_000);
        let a = Some(IpAddr::from([127, 0, 0, 2]));
        let held: Vec<Slot> = (0..PER_ADDRESS).map(|_| conns.admit(a).unwrap()).collect();
        assert!(conns.admit(a).is_none());
        assert!(conns.admit(Some(IpAddr::from([127, 0, 0, 1]))).is_some());
        assert!(conns.admit(None).is_some());
        drop(held);
        assert!(conns.admit(a).is_some());
    }

    #[test]
    fn the_total_follows_the_descriptors() {
        let conns = Conns::new(RESERVED + 20);
        let held: Vec<Slot> = (0..20).map(|_| conns.admit(None).unwrap()).collect();
        assert!(conns.admit(Some(IpAddr::from([127, 0, 0, 3]))).is_none());
        assert_eq!(held.len(), 20);
    }
}
