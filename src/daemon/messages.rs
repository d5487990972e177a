//! What wakes the dispatcher besides its own timers, and the threads that
//! send it: one that passes stop signals on, and, with a shared store, one
//! that passes on the store's notifications of changed loops. Both end
//! when the daemon stops (see `mod.rs`).

use std::thread;

#[cfg(unix)]
use signal_hook::consts::{SIGINT, SIGTERM};
#[cfg(unix)]
use signal_hook::iterator::{Handle, Signals};

use super::MAX_SLEEP;
use super::workers::Handoff;
use crate::error::{Error, Result};
use crate::store::{Change, Changes, Stores};

/// A message to the dispatcher.
pub(super) enum Msg {
    Signal(i32),
    /// A tick ended and the dispatcher is needed now (see [`Handoff`]).
    Done,
    /// A shared store said these loops changed (a commit, a new loop, an
    /// edit, a removal), possibly on another host.
    Changed(Vec<Change>),
    /// The shared store's notifications had a gap (their connection was
    /// lost and made again): any loop may have changed unseen.
    Resync,
}

/// A thread that passes each SIGTERM and SIGINT on to the dispatcher;
/// the handle stops it.
#[cfg(unix)]
pub(super) fn listen_for_signals(handoff: &Handoff) -> Result<Handle> {
    let mut signals = Signals::new([SIGTERM, SIGINT]).map_err(Error::Signals)?;
    let handle = signals.handle();
    let to_dispatcher = handoff.sender();
    let name = "signals";
    thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            for sig in signals.forever() {
                if to_dispatcher.send(Msg::Signal(sig)).is_err() {
                    break;
                }
            }
        })
        .map_err(|source| Error::DaemonThread {
            name: name.into(),
            source,
        })?;
    Ok(handle)
}

/// On Windows the console's Ctrl-C is passed on as SIGINT (2), and its
/// Ctrl-Break, close, logoff and shutdown as SIGTERM (15): the daemon
/// stops on each as on those signals, and on a service's stop
/// ([`service_stop`]) as on Ctrl-Break. A handler registered with
/// `SetConsoleCtrlHandler` runs on a thread the system makes for it.
#[cfg(windows)]
pub(super) fn listen_for_signals(handoff: &Handoff) -> Result<Handle> {
    use windows_sys::Win32::System::Console::SetConsoleCtrlHandler;
    {
        let mut to = console::TO_DISPATCHER
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let sender = handoff.sender();
        // A service's stop that came before the daemon listened.
        let pending = console::PENDING.swap(0, std::sync::atomic::Ordering::Relaxed);
        if pending != 0 {
            let _ = sender.send(Msg::Signal(pending));
        }
        *to = Some(sender);
    }
    // SAFETY: a handler that only sends on a channel under a lock.
    if unsafe { SetConsoleCtrlHandler(Some(console::handler), 1) } == 0 {
        return Err(Error::Signals(std::io::Error::last_os_error()));
    }
    Ok(Handle)
}

/// Stops passing the console's events on.
#[cfg(windows)]
pub(super) struct Handle;

#[cfg(windows)]
impl Handle {
    #[allow(clippy::unused_self)] // as signal-hook's handle, which Unix uses
    pub(super) fn close(&self) {
        use windows_sys::Win32::System::Console::SetConsoleCtrlHandler;
        // SAFETY: removes the handler registered above.
        unsafe { SetConsoleCtrlHandler(Some(console::handler), 0) };
        console::TO_DISPATCHER
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }
}

/// What a stop of the daemon as a Windows service is passed on as: the
/// dispatcher takes it as it takes Ctrl-Break.
#[cfg(windows)]
pub(super) const SERVICE_STOP: i32 = -15;

/// Passes the Service Control Manager's stop on to the dispatcher, the
/// way the console's events come ([`SERVICE_STOP`]); one that comes before
/// the daemon listens is passed on once it does.
#[cfg(windows)]
pub(super) fn service_stop() {
    let to = console::TO_DISPATCHER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match to.as_ref() {
        Some(to) => {
            let _ = to.send(Msg::Signal(SERVICE_STOP));
        }
        None => console::PENDING.store(SERVICE_STOP, std::sync::atomic::Ordering::Relaxed),
    }
}

#[cfg(windows)]
mod console {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicI32;
    use std::sync::mpsc::Sender;

    use windows_sys::Win32::System::Console::CTRL_C_EVENT;

    use super::Msg;

    pub(super) static TO_DISPATCHER: Mutex<Option<Sender<Msg>>> = Mutex::new(None);

    /// A stop that came while nobody listened (0: none).
    pub(super) static PENDING: AtomicI32 = AtomicI32::new(0);

    pub(super) unsafe extern "system" fn handler(event: u32) -> windows_sys::core::BOOL {
        let sig = if event == CTRL_C_EVENT { 2 } else { 15 };
        let sent = TO_DISPATCHER
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .is_some_and(|to| to.send(Msg::Signal(sig)).is_ok());
        i32::from(sent)
    }
}

/// The shared store's notifications, passed on to the dispatcher until
/// the daemon stops; a lost connection is made again, and the gap it
/// left is said with [`Msg::Resync`].
pub(super) fn relay_changes(stores: &Stores, listener: &mut Box<dyn Changes>, handoff: &Handoff) {
    let to_dispatcher = handoff.sender();
    while !handoff.is_closed() {
        let msg = match listener.wait(MAX_SLEEP) {
            Ok(names) if names.is_empty() => continue,
            Ok(names) => Msg::Changed(names),
            Err(e) => {
                tracing::warn!(
                    "{}; changes are seen at the next scan",
                    crate::error::with_causes(&e)
                );
                thread::sleep(MAX_SLEEP);
                let Ok(l) = stores.watch() else {
                    continue;
                };
                *listener = l;
                tracing::info!("listening for changes again; every loop's config is read anew");
                Msg::Resync
            }
        };
        if to_dispatcher.send(msg).is_err() {
            return;
        }
    }
}
