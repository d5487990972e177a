//! The configs the daemon is told of when they change (on Linux, by
//! inotify), so that a rescan reads what changed instead of looking at
//! every config's modification time in turns: an idle daemon's rescan
//! then costs a read of an empty queue, however many loops there are.
//!
//! Each loop's `loop.toml` is watched itself (not its directory, whose
//! files every tick writes), the link itself and not what a link points
//! at (a config is never read through a link). A config replaced by a
//! rename is told (its old file's link count drops, then the file goes);
//! the rescan then looks at the path again and watches the new file. The
//! loops directory is watched too, for loops that come, go or are moved.
//!
//! Watches are a per-user resource (`fs.inotify.max_user_watches`): the
//! daemon takes at most half of them, leaving the rest to the user's other
//! programs, and fewer when `AUTOMATON_WATCHES` says so. Past that, or
//! when the kernel has none left, a loop's config is looked at in turns,
//! as where no watch is to be had (another OS, a store on a server).

use std::sync::Arc;

/// What the queue told since the last look.
#[derive(Default)]
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(super) struct Heard {
    /// Loops whose config changed, or whose watch is gone (the file
    /// removed or replaced): each is looked at again, and watched anew.
    pub(super) changed: Vec<Arc<str>>,
    /// Names that came, went or moved in the loops directory.
    pub(super) listed: Vec<String>,
    /// Watches gone: the loop's config is no longer watched by it.
    pub(super) lost: Vec<(Arc<str>, i32)>,
    /// The queue overflowed: anything may have changed.
    pub(super) overflowed: bool,
}

#[cfg(target_os = "linux")]
pub(super) use linux::Watch;

#[cfg(not(target_os = "linux"))]
pub(super) use none::Watch;

/// How many watches the daemon may hold: half the user's, or fewer when
/// `AUTOMATON_WATCHES` says so (it never raises it: how the tests run out).
#[cfg(target_os = "linux")]
fn room(max_user_watches: Option<usize>) -> usize {
    let half = max_user_watches.map_or(4096, |m| m / 2);
    std::env::var("AUTOMATON_WATCHES")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(half, |n| n.min(half))
}

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::HashMap;
    use std::path::Path;
    use std::sync::Arc;

    use nix::errno::Errno;
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

    use super::Heard;

    /// A config changed in place (written, truncated, its times or mode
    /// set), or was removed, replaced or moved away.
    fn config_mask() -> AddWatchFlags {
        AddWatchFlags::IN_MODIFY
            | AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_ATTRIB
            | AddWatchFlags::IN_DELETE_SELF
            | AddWatchFlags::IN_MOVE_SELF
            | AddWatchFlags::IN_DONT_FOLLOW
    }

    /// A loop's directory came, went or moved.
    fn loops_mask() -> AddWatchFlags {
        AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_ONLYDIR
    }

    pub(in super::super) struct Watch {
        inotify: Inotify,
        loops: WatchDescriptor,
        /// The loop each config watch is for, by its descriptor.
        configs: HashMap<i32, (WatchDescriptor, Arc<str>)>,
        /// How many config watches may be held.
        room: usize,
        /// Whether running out was said in the log.
        said_full: bool,
    }

    impl Watch {
        /// A queue watching the loops directory `loops`; `None` when there
        /// is none to be had (every config is then looked at in turns).
        pub(in super::super) fn start(loops: &Path) -> Option<Watch> {
            let started = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
                .and_then(|inotify| inotify.add_watch(loops, loops_mask()).map(|wd| (inotify, wd)));
            match started {
                Ok((inotify, loops)) => Some(Watch {
                    inotify,
                    loops,
                    configs: HashMap::new(),
                    room: super::room(max_user_watches()),
                    said_full: false,
                }),
                Err(e) => {
                    tracing::info!("cannot watch the loops directory ({e}): configs are looked at in turns");
                    None
                }
            }
        }

        /// Watches loop `name`'s config at `path` (again: a file put in
        /// its place gets a watch of its own, and the old one is let go);
        /// `held` is the watch it had. The watch it has now: `None` when
        /// it has none (no file, or no watch left), and its config is then
        /// looked at in turns.
        pub(in super::super) fn watch(
            &mut self,
            name: &Arc<str>,
            path: &Path,
            held: Option<i32>,
        ) -> Option<i32> {
            if held.is_none() && self.configs.len() >= self.room {
                self.say_full();
                return None;
            }
            let wd = match self.inotify.add_watch(path, config_mask()) {
                Ok(wd) => wd,
                Err(e) => {
                    if e == Errno::ENOSPC {
                        // The user's watches are all taken: hold no more.
                        self.room = self.configs.len();
                        self.say_full();
                    }
                    if let Some(old) = held {
                        self.unwatch(name, old);
                    }
                    return None;
                }
            };
            let raw = wd.as_raw();
            if held == Some(raw) {
                return held;
            }
            if let Some(old) = held {
                self.unwatch(name, old);
            }
            match self.configs.get(&raw) {
                // One file for two loops (a hard link): the other keeps
                // the watch, this one is looked at in turns.
                Some((_, other)) if other != name => None,
                _ => {
                    self.configs.insert(raw, (wd, Arc::clone(name)));
                    Some(raw)
                }
            }
        }

        /// Lets go of loop `name`'s watch `raw` (the loop is gone, or its
        /// config was replaced).
        pub(in super::super) fn unwatch(&mut self, name: &str, raw: i32) {
            if self.configs.get(&raw).is_some_and(|(_, n)| &**n == name)
                && let Some((wd, _)) = self.configs.remove(&raw)
            {
                let _ = self.inotify.rm_watch(wd);
            }
        }

        /// What the queue told since the last look; never waits.
        pub(in super::super) fn take(&mut self) -> Heard {
            let mut heard = Heard::default();
            loop {
                let events = match self.inotify.read_events() {
                    Ok(events) if !events.is_empty() => events,
                    Ok(_) | Err(Errno::EAGAIN) => break,
                    Err(Errno::EINTR) => continue,
                    Err(e) => {
                        tracing::warn!("cannot read the configs' changes ({e}): looking at every config");
                        heard.overflowed = true;
                        break;
                    }
                };
                for e in events {
                    if e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                        heard.overflowed = true;
                    } else if e.wd == self.loops {
                        heard.listed.extend(e.name.and_then(|n| n.into_string().ok()));
                    } else if let Some((_, name)) = self.configs.get(&e.wd.as_raw()) {
                        let name = Arc::clone(name);
                        if e.mask.contains(AddWatchFlags::IN_IGNORED) {
                            self.configs.remove(&e.wd.as_raw());
                            heard.lost.push((Arc::clone(&name), e.wd.as_raw()));
                        }
                        heard.changed.push(name);
                    }
                }
            }
            heard
        }

        /// Says once that watches ran out, and what that costs.
        fn say_full(&mut self) {
            if !std::mem::replace(&mut self.said_full, true) {
                let watched = match self.configs.len() {
                    1 => "1 loop's config is".to_owned(),
                    n => format!("{n} loops' configs are"),
                };
                tracing::info!(
                    "{watched} watched and no more watches are to be had (the daemon takes \
                     half of fs.inotify.max_user_watches at most): the other configs are \
                     looked at in turns, about {} a rescan, so an edit of one may be seen later",
                    super::super::CONFIGS_PER_SCAN
                );
            }
        }
    }

    /// The user's limit of inotify watches.
    fn max_user_watches() -> Option<usize> {
        std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }
}

/// Where there is no inotify: every config is looked at in turns.
#[cfg(not(target_os = "linux"))]
mod none {
    use std::path::Path;
    use std::sync::Arc;

    use super::Heard;

    pub(in super::super) enum Watch {}

    impl Watch {
        pub(in super::super) fn start(_: &Path) -> Option<Watch> {
            None
        }

        pub(in super::super) fn watch(&mut self, _: &Arc<str>, _: &Path, _: Option<i32>) -> Option<i32> {
            match *self {}
        }

        pub(in super::super) fn unwatch(&mut self, _: &str, _: i32) {
            match *self {}
        }

        pub(in super::super) fn take(&mut self) -> Heard {
            match *self {}
        }
    }
}
