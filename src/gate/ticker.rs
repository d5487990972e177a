//! The epoch ticker: the thread that makes gate timeouts fire.
//!
//! A call's store has an epoch deadline one tick ahead and a callback that
//! traps once the call's own wall-clock deadline has passed (and otherwise
//! lets it go on). The ticker advances the engine's epoch only when the
//! earliest deadline of the calls running now has passed, and then every
//! [`EPOCH_TICK`] until that call ends. It sleeps until that deadline
//! otherwise, and parks when no call runs.
//!
//! So the thread wakes about once per timeout period, not once per call:
//! with equal timeouts a new call's deadline is later than the one the
//! ticker already waits for, and registering it wakes nothing. Only a call
//! whose deadline is earlier than the ticker's next wake-up (or one that
//! finds it parked) wakes it. A wake-up a call asked for is kept when that
//! call ends before the ticker runs (as a quick call does): the calls
//! after it then find the ticker waiting, not parked, and wake nothing.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the epoch advances while a call is past its deadline and has
/// not yet stopped (it may be in host code, which the epoch does not stop).
const EPOCH_TICK: Duration = Duration::from_millis(2);

/// When a call that starts at `start` with this timeout is due (a timeout
/// too large to add is as good as none).
pub(crate) fn deadline(start: Instant, timeout: Duration) -> Instant {
    start
        .checked_add(timeout)
        .unwrap_or_else(|| start + Duration::from_hours(876000))
}

/// Advances the epoch when a running call's deadline passes.
pub(crate) struct Ticker {
    shared: Arc<TickerShared>,
    thread: Option<JoinHandle<()>>,
}

struct TickerShared {
    calls: Mutex<Calls>,
    stop: AtomicBool,
}

#[derive(Default)]
struct Calls {
    /// The deadlines of the calls running now, each with a unique number.
    deadlines: BTreeSet<(Instant, u64)>,
    next: u64,
    /// When the ticker wakes next; `None` while it is parked.
    wakes_at: Option<Instant>,
    /// How many times the ticker has woken (and first run).
    runs: u64,
}

impl TickerShared {
    fn lock(&self) -> MutexGuard<'_, Calls> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Ticker {
    /// Starts the thread; `advance` moves the epoch on (the engine's
    /// `increment_epoch`).
    pub(crate) fn start(advance: impl Fn() + Send + 'static) -> std::io::Result<Ticker> {
        let shared = Arc::new(TickerShared {
            calls: Mutex::new(Calls::default()),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("gate-epoch".into())
            .spawn(move || s.run(advance))?;
        Ok(Ticker {
            shared,
            thread: Some(thread),
        })
    }

    /// Marks a call with this deadline as running until the guard drops.
    pub(crate) fn running(&self, deadline: Instant) -> RunningGuard {
        self.handle().running(deadline)
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

impl TickerShared {
    fn run(&self, advance: impl Fn()) {
        let mut calls = self.lock();
        while !self.stop.load(Ordering::Acquire) {
            let now = Instant::now();
            calls.runs += 1;
            let wake = match calls.deadlines.first() {
                // The wake-up the last call asked for, if it is still ahead.
                None => calls.wakes_at.filter(|&at| at > now),
                Some(&(deadline, _)) if deadline > now => Some(deadline),
                Some(_) => {
                    // Past due: the call traps at its next epoch check.
                    advance();
                    Some(now + EPOCH_TICK)
                }
            };
            calls.wakes_at = wake;
            drop(calls);
            match wake {
                None => std::thread::park(),
                Some(at) => std::thread::park_timeout(at.saturating_duration_since(now)),
            }
            calls = self.lock();
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
    /// Marks a call with this deadline as running until the guard drops;
    /// wakes the ticker only when it would otherwise wake too late.
    pub(crate) fn running(&self, deadline: Instant) -> RunningGuard {
        let mut calls = self.shared.lock();
        let id = calls.next;
        calls.next += 1;
        calls.deadlines.insert((deadline, id));
        let wake = calls.wakes_at.is_none_or(|at| deadline < at);
        if wake {
            // Set here, so calls registered before the ticker runs do not
            // wake it again.
            calls.wakes_at = Some(deadline);
        }
        drop(calls);
        if wake && let Some(t) = &self.thread {
            t.unpark();
        }
        RunningGuard {
            shared: self.shared.clone(),
            key: (deadline, id),
        }
    }
}

/// A running call; its deadline is forgotten when this drops. The ticker
/// is not woken: if it waits for this deadline, it finds nothing due then.
pub(crate) struct RunningGuard {
    shared: Arc<TickerShared>,
    key: (Instant, u64),
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.shared.lock().deadlines.remove(&self.key);
    }
}

impl Drop for Ticker {
    /// Tells the thread to stop and lets it go: it ends when it next runs.
    /// Joining it would make every process that ran a gate wait for it.
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn counting() -> (Ticker, Arc<AtomicU64>) {
        let count = Arc::new(AtomicU64::new(0));
        let c = count.clone();
        let ticker = Ticker::start(move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        (ticker, count)
    }

    #[test]
    fn calls_that_end_before_their_deadline_never_advance_the_epoch() {
        let (ticker, count) = counting();
        for _ in 0..200 {
            let _call = ticker.running(Instant::now() + Duration::from_mins(1));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(count.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn quick_calls_one_after_another_wake_the_ticker_once() {
        let (ticker, count) = counting();
        for _ in 0..50 {
            let call = ticker.running(Instant::now() + Duration::from_mins(1));
            // Each call has ended before the ticker could run.
            drop(call);
            std::thread::sleep(Duration::from_millis(1));
        }
        let runs = ticker.shared.lock().runs;
        assert!(runs <= 3, "the ticker woke {runs} times for 50 calls");
        assert_eq!(count.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_call_past_its_deadline_advances_the_epoch_until_it_ends() {
        let (ticker, count) = counting();
        // A long-lived call registered first: the ticker waits for it.
        let _long = ticker.running(Instant::now() + Duration::from_mins(1));
        // An earlier deadline must wake it anyway.
        let call = ticker.running(Instant::now() + Duration::from_millis(20));
        let until = Instant::now() + Duration::from_secs(30);
        while count.load(Ordering::SeqCst) < 3 {
            assert!(Instant::now() < until, "the epoch never advanced");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(call);
        // Once it ended, nothing is due: the ticker stops advancing.
        std::thread::sleep(Duration::from_millis(20));
        let settled = count.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(count.load(Ordering::SeqCst), settled);
    }
}
