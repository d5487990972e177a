//! The epoch ticker: a thread that advances the engine's epoch while a gate
//! call runs, which is what makes epoch deadlines (timeouts) fire. It parks
//! when no call runs, so an idle process does not wake up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::Engine;

/// How often the epoch advances while a call runs: the timeout's granularity.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(2);

/// Advances the engine's epoch while at least one call runs, so timeouts
/// fire; parks otherwise, so an idle process does not wake up.
pub(crate) struct Ticker {
    shared: Arc<TickerShared>,
    thread: Option<JoinHandle<()>>,
}

struct TickerShared {
    running: AtomicUsize,
    stop: AtomicBool,
}

impl Ticker {
    pub(crate) fn start(engine: Engine) -> std::io::Result<Ticker> {
        let shared = Arc::new(TickerShared {
            running: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("gate-epoch".into())
            .spawn(move || {
                while !s.stop.load(Ordering::Acquire) {
                    if s.running.load(Ordering::Acquire) == 0 {
                        std::thread::park();
                        continue;
                    }
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })?;
        Ok(Ticker {
            shared,
            thread: Some(thread),
        })
    }

    /// Marks a call as running until the guard drops.
    pub(crate) fn running(&self) -> RunningGuard {
        self.handle().running()
    }

    /// A handle another thread can mark its calls running with (a host's
    /// preparing thread). It does not keep the ticker thread alive.
    pub(crate) fn handle(&self) -> TickerHandle {
        TickerHandle {
            shared: self.shared.clone(),
            thread: self.thread.as_ref().map(|t| t.thread().clone()),
        }
    }
}

/// See [`Ticker::handle`].
#[derive(Clone)]
pub(crate) struct TickerHandle {
    shared: Arc<TickerShared>,
    thread: Option<std::thread::Thread>,
}

impl TickerHandle {
    /// Marks a call as running until the guard drops.
    pub(crate) fn running(&self) -> RunningGuard {
        self.shared.running.fetch_add(1, Ordering::AcqRel);
        if let Some(t) = &self.thread {
            t.unpark();
        }
        RunningGuard(self.shared.clone())
    }
}

pub(crate) struct RunningGuard(Arc<TickerShared>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for Ticker {
    /// Tells the thread to stop and lets it go: it ends at its next wake-up
    /// (at most one tick away). Joining it would make every process that ran
    /// a gate wait out that sleep before it can exit.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
        }
    }
}
