//! Instances prepared ahead, for a long-lived host: for each component and
//! set of limits at most one spare, made by a background thread off the
//! call's path and never called before an evaluation takes it. The same
//! thread drops spent instances (which is when their memory is reset).
//! Generic over what is kept, so the bookkeeping is tested without wasmtime.
//!
//! The thread works only when asked (one preparation per evaluation that
//! asks, one drop per spent instance) and waits otherwise; it is told to
//! stop when its owner drops and is not joined, so it never holds up a
//! process's exit.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::domain::Limits;

/// What a spare is made for: a component's content under one set of limits.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SpareKey {
    pub(crate) sha256: String,
    pub(crate) limits: Limits,
}

/// Instances that take less than this to make are made in the call, not
/// ahead: handing one to the thread and waking it costs about as much on
/// each side (a small compiled gate's instance takes tens of microseconds;
/// an interpreter's, a millisecond or more).
pub(crate) const AHEAD_FROM: Duration = Duration::from_micros(250);

/// Makes one spare; `None` when it cannot be made now (a full pool).
pub(crate) type Make<T> = Box<dyn FnOnce() -> Option<T> + Send>;

/// What the spares have done so far in this process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpareStats {
    /// Spares ready to be taken now.
    pub ready: usize,
    /// Evaluations that took a spare.
    pub taken: u64,
    /// Evaluations that found none and made their instance themselves.
    pub missed: u64,
    /// Spares dropped unused: their component's file changed, or room was
    /// needed for another component's.
    pub dropped: u64,
    /// Evaluations of gates whose instances are quick to make (under
    /// [`AHEAD_FROM`]) that found no spare, made their own and asked for
    /// none.
    pub in_call: u64,
}

/// What [`Spares::take`] found.
pub(crate) struct Taken<T> {
    pub(crate) spare: Option<T>,
    /// Whether to ask for the next spare (the gate is not quick to make).
    pub(crate) ahead: bool,
}

/// The spares of a host, and the thread that makes them.
pub(crate) struct Spares<T: Send + 'static> {
    shared: Arc<Shared<T>>,
}

struct Shared<T> {
    work: Mutex<Work<T>>,
    wake: Condvar,
    /// The most spares kept at once.
    capacity: usize,
}

struct Work<T> {
    ready: HashMap<SpareKey, Ready<T>>,
    wanted: VecDeque<(SpareKey, Make<T>)>,
    /// The key being made now, and whether it is to be thrown away when
    /// done (its component was forgotten meanwhile).
    making: Option<(SpareKey, bool)>,
    spent: Vec<Box<dyn Send>>,
    /// How long the last instance of each key took to make, ahead or in a
    /// call: whether it is worth making ahead.
    costs: HashMap<SpareKey, Duration>,
    /// Instances quicker to make than this are made in the call.
    ahead_from: Duration,
    /// Counts requests, so the least recently wanted spare is known.
    clock: u64,
    stats: SpareStats,
    stop: bool,
}

struct Ready<T> {
    value: T,
    wanted_at: u64,
}

impl<T: Send + 'static> Spares<T> {
    /// Starts the thread; at most `capacity` spares are kept.
    pub(crate) fn start(capacity: usize) -> std::io::Result<Spares<T>> {
        let shared = Arc::new(Shared {
            work: Mutex::new(Work {
                ready: HashMap::new(),
                wanted: VecDeque::new(),
                making: None,
                spent: Vec::new(),
                costs: HashMap::new(),
                ahead_from: AHEAD_FROM,
                clock: 0,
                stats: SpareStats::default(),
                stop: false,
            }),
            wake: Condvar::new(),
            capacity: capacity.max(1),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name("gate-spares".into())
            .spawn(move || s.run())?;
        Ok(Spares { shared })
    }

    /// Instances quicker to make than `took` are made in the call
    /// ([`AHEAD_FROM`] unless set): zero makes every one ahead.
    pub(crate) fn set_ahead_from(&self, took: Duration) {
        self.shared.lock().ahead_from = took;
    }

    /// Records how long a call took to make its own instance of `key`.
    pub(crate) fn made_in_call(&self, key: &SpareKey, took: Duration) {
        self.shared.lock().costs.insert(key.clone(), took);
    }

    /// The spare for `key`, if one is ready, and whether the next is to be
    /// made ahead: until one was made (and timed) and took less than the
    /// threshold ([`AHEAD_FROM`]). A quick gate's spare made before it was
    /// timed is still taken, so it does not hold a pool slot for nothing.
    pub(crate) fn take(&self, key: &SpareKey) -> Taken<T> {
        let mut work = self.shared.lock();
        let from = work.ahead_from;
        let ahead = work.costs.get(key).is_none_or(|took| *took >= from);
        let spare = work.ready.remove(key).map(|r| r.value);
        match (&spare, ahead) {
            (Some(_), _) => work.stats.taken += 1,
            (None, true) => work.stats.missed += 1,
            (None, false) => work.stats.in_call += 1,
        }
        Taken { spare, ahead }
    }

    /// Hands over a spent instance to be dropped off the caller's path, and
    /// asks for a spare for `key` unless one is ready or on its way.
    pub(crate) fn refill(&self, key: SpareKey, make: Make<T>, spent: Box<dyn Send>) {
        let mut work = self.shared.lock();
        work.spent.push(spent);
        work.clock += 1;
        let now = work.clock;
        if let Some(r) = work.ready.get_mut(&key) {
            r.wanted_at = now;
        } else if !work.wanted.iter().any(|(k, _)| *k == key)
            && work.making.as_ref().is_none_or(|(k, _)| *k != key)
        {
            work.wanted.push_back((key, make));
        }
        drop(work);
        self.shared.wake.notify_one();
    }

    /// Drops the spares of a component (its file changed or went away), and
    /// any on their way.
    pub(crate) fn forget(&self, sha256: &str) {
        let mut work = self.shared.lock();
        let before = work.ready.len();
        let gone: Vec<T> = extract(&mut work.ready, |k| k.sha256 == sha256);
        work.stats.dropped += (before - work.ready.len()) as u64;
        work.wanted.retain(|(k, _)| k.sha256 != sha256);
        work.costs.retain(|k, _| k.sha256 != sha256);
        if let Some((k, discard)) = &mut work.making
            && k.sha256 == sha256
        {
            *discard = true;
        }
        drop(work);
        drop(gone);
    }

    pub(crate) fn stats(&self) -> SpareStats {
        let work = self.shared.lock();
        SpareStats {
            ready: work.ready.len(),
            ..work.stats
        }
    }
}

impl<T: Send + 'static> Drop for Spares<T> {
    /// Tells the thread to drop what it holds and end; it is not waited for.
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
    }
}

/// Removes the entries whose key matches, returning their values.
fn extract<T>(ready: &mut HashMap<SpareKey, Ready<T>>, pred: impl Fn(&SpareKey) -> bool) -> Vec<T> {
    let keys: Vec<SpareKey> = ready.keys().filter(|k| pred(k)).cloned().collect();
    keys.iter()
        .filter_map(|k| ready.remove(k).map(|r| r.value))
        .collect()
}

/// What the thread does next.
enum Job<T> {
    Drop(Vec<Box<dyn Send>>),
    Make(SpareKey, Make<T>, Option<T>),
    Stop(Vec<Box<dyn Send>>, Vec<T>),
}

impl<T: Send + 'static> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, Work<T>> {
        self.work
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn run(&self) {
        loop {
            match self.next_job() {
                Job::Drop(spent) => drop(spent),
                Job::Make(key, make, evicted) => {
                    // An evicted spare gives back its pool slot first.
                    drop(evicted);
                    let started = Instant::now();
                    let made = make();
                    let took = started.elapsed();
                    self.store(key, made, took);
                }
                Job::Stop(spent, ready) => {
                    drop(spent);
                    drop(ready);
                    return;
                }
            }
        }
    }

    /// Waits for work: spent instances first (they hold pool slots), then
    /// the oldest request.
    fn next_job(&self) -> Job<T> {
        let mut work = self.lock();
        loop {
            if work.stop {
                let spent = std::mem::take(&mut work.spent);
                let ready = extract(&mut work.ready, |_| true);
                work.wanted.clear();
                return Job::Stop(spent, ready);
            }
            if !work.spent.is_empty() {
                return Job::Drop(std::mem::take(&mut work.spent));
            }
            if let Some((key, make)) = work.wanted.pop_front() {
                let evicted = if work.ready.len() >= self.capacity {
                    work.stats.dropped += 1;
                    least_wanted(&work.ready).and_then(|k| work.ready.remove(&k).map(|r| r.value))
                } else {
                    None
                };
                work.making = Some((key.clone(), false));
                return Job::Make(key, make, evicted);
            }
            work = self
                .wake
                .wait(work)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Keeps a spare just made, unless it was forgotten meanwhile or the
    /// owner is gone.
    fn store(&self, key: SpareKey, made: Option<T>, took: Duration) {
        let mut work = self.lock();
        let discard = matches!(work.making.take(), Some((_, true)));
        let Some(value) = made else { return };
        if !discard {
            work.costs.insert(key.clone(), took);
        }
        if discard || work.stop {
            work.stats.dropped += u64::from(discard);
            drop(work);
            drop(value);
            return;
        }
        let wanted_at = work.clock;
        work.ready.insert(key, Ready { value, wanted_at });
    }
}

fn least_wanted<T>(ready: &HashMap<SpareKey, Ready<T>>) -> Option<SpareKey> {
    ready
        .iter()
        .min_by_key(|(_, r)| r.wanted_at)
        .map(|(k, _)| k.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Spares whose every key is made ahead, however quick (the makers
    /// here take no time).
    fn started<T: Send + 'static>(capacity: usize) -> Spares<T> {
        let s = Spares::start(capacity).unwrap();
        s.set_ahead_from(Duration::ZERO);
        s
    }

    fn key(sha: &str) -> SpareKey {
        SpareKey {
            sha256: sha.to_owned(),
            limits: Limits::default(),
        }
    }

    /// Counts the values alive, so a test sees what was dropped.
    struct Counted(Arc<AtomicUsize>, u32);

    impl Counted {
        fn new(live: &Arc<AtomicUsize>, n: u32) -> Counted {
            live.fetch_add(1, Ordering::SeqCst);
            Counted(live.clone(), n)
        }
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn maker(live: &Arc<AtomicUsize>, n: u32) -> Make<Counted> {
        let live = live.clone();
        Box::new(move || Some(Counted::new(&live, n)))
    }

    /// Waits (bounded) until the thread has done what was asked.
    fn settle<T: Send>(s: &Spares<T>, ready: usize) {
        for _ in 0..10_000 {
            let w = s.shared.lock();
            if w.ready.len() == ready && w.wanted.is_empty() && w.making.is_none() && w.spent.is_empty() {
                return;
            }
            drop(w);
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("the spares thread did not settle");
    }

    #[test]
    fn a_spare_is_made_once_taken_once_and_spent_ones_are_dropped() {
        let live = Arc::new(AtomicUsize::new(0));
        let s = started(4);
        assert!(s.take(&key("a")).spare.is_none());
        s.refill(key("a"), maker(&live, 1), Box::new(Counted::new(&live, 0)));
        // Asked again before it is ready: still one.
        s.refill(key("a"), maker(&live, 2), Box::new(()));
        settle(&s, 1);
        assert_eq!(
            live.load(Ordering::SeqCst),
            1,
            "the spent one is dropped, one spare kept"
        );
        let got = s.take(&key("a")).spare.unwrap();
        assert_eq!(got.1, 1);
        assert!(s.take(&key("a")).spare.is_none(), "a spare is taken once");
        let stats = s.stats();
        assert_eq!((stats.taken, stats.missed, stats.ready), (1, 2, 0));
    }

    #[test]
    fn forgetting_a_component_drops_its_spares_only() {
        let live = Arc::new(AtomicUsize::new(0));
        let s = started(4);
        s.refill(key("a"), maker(&live, 1), Box::new(()));
        s.refill(key("b"), maker(&live, 2), Box::new(()));
        settle(&s, 2);
        s.forget("a");
        assert_eq!(live.load(Ordering::SeqCst), 1);
        assert!(s.take(&key("a")).spare.is_none());
        assert_eq!(s.take(&key("b")).spare.unwrap().1, 2);
        assert_eq!(s.stats().dropped, 1);
    }

    #[test]
    fn at_capacity_the_least_recently_wanted_spare_makes_room() {
        let live = Arc::new(AtomicUsize::new(0));
        let s = started(2);
        s.refill(key("a"), maker(&live, 1), Box::new(()));
        s.refill(key("b"), maker(&live, 2), Box::new(()));
        settle(&s, 2);
        // "a" wanted again (it has its spare), then a third component.
        s.refill(key("a"), maker(&live, 9), Box::new(()));
        s.refill(key("c"), maker(&live, 3), Box::new(()));
        settle(&s, 2);
        assert_eq!(live.load(Ordering::SeqCst), 2);
        assert!(
            s.take(&key("b")).spare.is_none(),
            "b was the least recently wanted"
        );
        assert_eq!(s.take(&key("a")).spare.unwrap().1, 1);
        assert_eq!(s.take(&key("c")).spare.unwrap().1, 3);
    }

    #[test]
    fn a_spare_that_cannot_be_made_is_not_retried_until_asked() {
        let tries = Arc::new(AtomicUsize::new(0));
        let s: Spares<u32> = started(2);
        let t = tries.clone();
        s.refill(
            key("a"),
            Box::new(move || {
                t.fetch_add(1, Ordering::SeqCst);
                None
            }),
            Box::new(()),
        );
        settle(&s, 0);
        assert_eq!(tries.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn dropping_the_owner_drops_everything_the_thread_holds() {
        let live = Arc::new(AtomicUsize::new(0));
        let s = started(2);
        s.refill(key("a"), maker(&live, 1), Box::new(()));
        settle(&s, 1);
        let shared = Arc::downgrade(&s.shared);
        drop(s);
        for _ in 0..10_000 {
            if shared.upgrade().is_none() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(shared.upgrade().is_none(), "the thread ended");
        assert_eq!(live.load(Ordering::SeqCst), 0);
    }
}
