//! The daemon's webhook queue: its workers hand notices over and go on;
//! a small fixed pool of [`THREADS`] threads delivers them. Notices wait
//! in a queue per URL, and each URL is delivered one notice at a time, in
//! the order they came, so a receiver that is slow or never answers holds
//! one thread (each delivery at most its `webhook_timeout`) and its own
//! queue, never the notices for other URLs. URLs with notices waiting take
//! turns for the free threads.
//!
//! Memory is bounded: at most [`PER_URL`] notices wait for one URL and
//! [`TOTAL`] in all; a notice past either is dropped, and that is logged
//! with the loop, the URL (masked), how many wait and how many were
//! dropped since the daemon started. A stopping daemon gives what waits
//! [`DRAIN`] to be delivered, and logs how many notices it leaves.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::webhook::{Delivery, deliver};

/// The threads that deliver.
pub(super) const THREADS: usize = 4;
/// Notices that may wait for one URL.
pub(super) const PER_URL: usize = 64;
/// Notices that may wait in all.
pub(super) const TOTAL: usize = 256;
/// How long a stopping daemon waits for the queue to be delivered.
const DRAIN: Duration = Duration::from_secs(10);

/// The pool the daemon started, while it runs.
static STARTED: Mutex<Option<Arc<Pool>>> = Mutex::new(None);

/// Puts `delivery` on the daemon's queue; gives it back when no daemon
/// started one (the caller then delivers it itself).
pub(super) fn offer(delivery: Delivery) -> Option<Delivery> {
    let pool = STARTED.lock().ok().and_then(|p| p.clone());
    let Some(pool) = pool else { return Some(delivery) };
    if let Err(refused) = pool.push(delivery) {
        refused.log();
    }
    None
}

/// The daemon's queue, from [`Queue::start`] until the guard is dropped,
/// which gives what waits [`DRAIN`] to be delivered.
pub(crate) struct Queue {
    pool: Option<Arc<Pool>>,
}

impl Queue {
    pub(crate) fn start() -> Queue {
        let limits = Limits {
            threads: THREADS,
            per_url: PER_URL,
            total: TOTAL,
        };
        let pool = Pool::start(limits, Arc::new(deliver));
        if let (Some(pool), Ok(mut started)) = (&pool, STARTED.lock()) {
            *started = Some(pool.clone());
        }
        Queue { pool }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        if let Ok(mut started) = STARTED.lock() {
            started.take();
        }
        if let Some(pool) = self.pool.take() {
            let left = pool.close(DRAIN);
            if left > 0 {
                tracing::warn!(
                    "{left} webhook notices still waiting or being delivered after {}s are dropped",
                    DRAIN.as_secs()
                );
            }
        }
    }
}

/// How many threads deliver, and how many notices may wait.
#[derive(Debug, Clone, Copy)]
struct Limits {
    threads: usize,
    per_url: usize,
    total: usize,
}

/// What delivers one notice: [`deliver`], or a test's stand-in.
type Deliver = Arc<dyn Fn(&Delivery) + Send + Sync>;

/// The queues and the threads that deliver them.
struct Pool {
    limits: Limits,
    waiting: Mutex<Waiting>,
    /// Wakes a thread when a URL is ready, or all when the pool closes.
    ready: Condvar,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// The notices waiting, by URL.
#[derive(Default)]
struct Waiting {
    queues: HashMap<String, VecDeque<Delivery>>,
    /// The URLs with notices waiting and none being delivered, in turn.
    turns: VecDeque<String>,
    /// The URLs a thread is delivering to.
    busy: HashSet<String>,
    /// Notices waiting, in all.
    len: usize,
    /// Notices dropped since the pool started.
    dropped: u64,
    closed: bool,
}

/// A notice the queue would not take.
#[derive(Debug, PartialEq)]
struct Refused {
    loop_name: String,
    url: String,
    why: Full,
    /// Dropped since the pool started, this one included.
    dropped: u64,
}

#[derive(Debug, PartialEq)]
enum Full {
    /// So many wait for this URL already.
    Url(usize),
    /// So many wait in all already.
    All(usize),
    /// The daemon is stopping.
    Closed,
}

impl Refused {
    fn log(&self) {
        let why = match self.why {
            Full::Url(n) => format!("{n} notices wait for this URL already"),
            Full::All(n) => format!("{n} notices wait already"),
            Full::Closed => "the daemon is stopping".to_owned(),
        };
        tracing::warn!(
            "loop {:?}: webhook {}: notice dropped, {why} ({} dropped since the daemon started)",
            self.loop_name,
            self.url,
            self.dropped
        );
    }
}

impl Pool {
    /// The pool, with its threads started; none when no thread could be
    /// (the notices are then delivered by whoever makes them).
    fn start(limits: Limits, deliver: Deliver) -> Option<Arc<Pool>> {
        let pool = Arc::new(Pool {
            limits,
            waiting: Mutex::new(Waiting::default()),
            ready: Condvar::new(),
            threads: Mutex::new(Vec::new()),
        });
        let mut threads = Vec::new();
        for i in 0..limits.threads {
            let (mine, deliver) = (pool.clone(), deliver.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("webhook-{i}"))
                .spawn(move || mine.run(deliver.as_ref()));
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => tracing::warn!("webhook delivery thread {i} not started: {e}"),
            }
        }
        if threads.is_empty() {
            tracing::warn!("webhooks are delivered by the ticks' workers: no thread for them");
            return None;
        }
        *pool
            .threads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = threads;
        Some(pool)
    }

    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `d` behind the notices waiting for its URL.
    fn push(&self, d: Delivery) -> Result<(), Refused> {
        let mut w = self.lock();
        let url = d.url.as_str().to_owned();
        let waiting = w.queues.get(&url).map_or(0, VecDeque::len);
        let full = if w.closed {
            Some(Full::Closed)
        } else if waiting >= self.limits.per_url {
            Some(Full::Url(waiting))
        } else if w.len >= self.limits.total {
            Some(Full::All(w.len))
        } else {
            None
        };
        if let Some(why) = full {
            w.dropped += 1;
            return Err(Refused {
                loop_name: d.loop_name,
                url: d.url.masked(),
                why,
                dropped: w.dropped,
            });
        }
        w.len += 1;
        w.queues.entry(url.clone()).or_default().push_back(d);
        if waiting == 0 && !w.busy.contains(&url) {
            w.turns.push_back(url);
            self.ready.notify_one();
        }
        Ok(())
    }

    /// A delivery thread: takes the next URL's turn, delivers its first
    /// notice, and gives the URL a turn again if more wait; ends when the
    /// pool is closed and nothing is left to take.
    fn run(&self, deliver: &(dyn Fn(&Delivery) + Send + Sync)) {
        loop {
            let mut w = self.lock();
            while w.turns.is_empty() && !w.closed {
                w = self
                    .ready
                    .wait(w)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            let Some((url, d)) = w.take() else { return };
            drop(w);
            deliver(&d);
            let mut w = self.lock();
            w.busy.remove(&url);
            if w.queues.contains_key(&url) {
                w.turns.push_back(url);
                self.ready.notify_one();
            }
        }
    }

    /// Closes the pool: what waits is still delivered, for at most
    /// `within`. Returns how many notices were left.
    fn close(&self, within: Duration) -> usize {
        self.lock().closed = true;
        self.ready.notify_all();
        let threads = std::mem::take(
            &mut *self
                .threads
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let until = Instant::now() + within;
        while threads.iter().any(|t| !t.is_finished()) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        for t in threads.into_iter().filter(JoinHandle::is_finished) {
            let _ = t.join();
        }
        let w = self.lock();
        w.len + w.busy.len()
    }
}

impl Waiting {
    /// The first notice of the URL whose turn it is, the URL marked busy.
    fn take(&mut self) -> Option<(String, Delivery)> {
        let url = self.turns.pop_front()?;
        let queue = self.queues.get_mut(&url).expect("a URL in turn has a queue");
        let d = queue.pop_front().expect("a URL in turn has a notice waiting");
        if queue.is_empty() {
            self.queues.remove(&url);
        }
        self.len -= 1;
        self.busy.insert(url.clone());
        Some((url, d))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{self, Receiver, Sender};

    use super::*;
    use crate::config::notify::HttpUrl;

    const WAIT: Duration = Duration::from_secs(30);

    fn notice(url: &str, n: usize) -> Delivery {
        Delivery {
            url: HttpUrl::parse(url).unwrap(),
            body: n.to_string(),
            bound: Duration::from_secs(1),
            loop_name: "agent".into(),
        }
    }

    /// A receiver stand-in: a URL on host `dead` answers when the test
    /// releases it (saying it started on `started`); every delivery is
    /// told on `told`, as `host/body`.
    struct Receivers {
        started: Receiver<String>,
        told: Receiver<String>,
        release: Sender<()>,
    }

    fn receivers() -> (Deliver, Receivers) {
        let (started_tx, started) = mpsc::channel();
        let (told_tx, told) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let (started_tx, told_tx) = (Mutex::new(started_tx), Mutex::new(told_tx));
        let released = Mutex::new(released);
        let deliver: Deliver = Arc::new(move |d: &Delivery| {
            let host = d.url.as_str().split('/').nth(2).unwrap().to_owned();
            let said = format!("{host}/{}", d.body);
            if host.starts_with("dead") {
                let _ = started_tx.lock().unwrap().send(said.clone());
                let _ = released.lock().unwrap().recv_timeout(Duration::from_mins(1));
            }
            let _ = told_tx.lock().unwrap().send(said);
        });
        (
            deliver,
            Receivers {
                started,
                told,
                release,
            },
        )
    }

    #[test]
    fn a_receiver_that_never_answers_holds_its_own_url_only() {
        let (deliver, r) = receivers();
        let limits = Limits {
            threads: 2,
            per_url: 3,
            total: 10,
        };
        let pool = Pool::start(limits, deliver).unwrap();
        pool.push(notice("http://dead/hook", 0)).unwrap();
        assert_eq!(r.started.recv_timeout(WAIT).unwrap(), "dead/0");
        for n in 1..=3 {
            pool.push(notice("http://dead/hook", n)).unwrap();
        }
        let refused = pool.push(notice("http://dead/hook", 4)).unwrap_err();
        assert_eq!((refused.why, refused.dropped), (Full::Url(3), 1));
        for n in 0..8 {
            pool.push(notice("http://live/hook", n)).unwrap();
            let told = r
                .told
                .recv_timeout(WAIT)
                .expect("delivered while the dead URL held a thread");
            assert_eq!(told, format!("live/{n}"));
        }
        assert!(r.started.try_recv().is_err(), "one delivery to a URL at a time");
        for _ in 0..4 {
            r.release.send(()).unwrap();
        }
        assert_eq!(pool.close(WAIT), 0, "all delivered before the pool closed");
        let dead: Vec<String> = r.told.try_iter().collect();
        assert_eq!(dead, ["dead/0", "dead/1", "dead/2", "dead/3"]);
    }

    #[test]
    fn past_the_total_notices_are_dropped_and_counted_and_a_closed_pool_says_what_it_left() {
        let (deliver, r) = receivers();
        let limits = Limits {
            threads: 2,
            per_url: 3,
            total: 4,
        };
        let pool = Pool::start(limits, deliver).unwrap();
        for url in ["http://dead-a/", "http://dead-b/"] {
            pool.push(notice(url, 0)).unwrap();
            r.started.recv_timeout(WAIT).unwrap();
        }
        for n in 1..=3 {
            pool.push(notice("http://dead-a/", n)).unwrap();
        }
        pool.push(notice("http://dead-b/", 1)).unwrap();
        let refused = pool.push(notice("http://live/", 0)).unwrap_err();
        assert_eq!((refused.why, refused.dropped), (Full::All(4), 1));
        let again = pool.push(notice("http://dead-b/", 2)).unwrap_err();
        assert_eq!((again.why, again.dropped), (Full::All(4), 2));
        assert_eq!(
            pool.close(Duration::from_millis(50)),
            6,
            "two in delivery and four waiting"
        );
        let late = pool.push(notice("http://live/", 1)).unwrap_err();
        assert_eq!((late.why, late.dropped), (Full::Closed, 3));
        for _ in 0..6 {
            let _ = r.release.send(());
        }
    }
}
