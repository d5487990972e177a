//! The lease that makes a loop's lock safe when its holder's session is
//! lost (docs/postgres.md, "The lock"). A session-level advisory lock is
//! freed by the server the moment the holder's connection ends: a backend
//! terminated, a server restarted, an idle timeout, a network cut, while
//! the holder and its step live on. So the lock is also a row of `leases`
//! with a fence and an expiry set by the server's clock: the lock is taken
//! only once the last lease has run out (or was let go, or its holder is a
//! process of this machine, boot and PID namespace that is gone), and with the next fence; a commit
//! is accepted only under its holder's fence and an unexpired lease. The
//! lease decides, not the advisory lock: a holder cut off from the server
//! leaves a session there that keeps the advisory lock until the server
//! notices, and a lease run out is taken without it.
//!
//! The process renews every lease it holds every quarter of their length,
//! all in one statement on one connection per store ([`Renewals`], made
//! again when it breaks): a running tick needs no connection of its own to
//! keep its lease, only the lock's session. A watchdog thread
//! that never waits on the server counts, by the holder's monotonic clock,
//! from the moment the last renewal that succeeded was sent: the server
//! set that lease's expiry later than that, so the lease lasts at least
//! the length past it. Three quarters of the length past it with no
//! renewal since, the watchdog declares the lock lost ([`LockWatch`]),
//! which kills the step's group at once: a quarter of the length before
//! the server could give the lock to anyone else. Each such deadline is
//! also handed to the step's guard ([`LockWatch::renewed`]), which kills
//! the group at it on a clock that counts suspend, whatever becomes of
//! this process (stopped, suspended, starved).

use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use super::client::{Client, PgError, Transaction};
use super::conn::Connector;

use crate::lock::{Holder, LockWatch};

/// How long a lease lasts past its last renewal, by the server's clock,
/// unless `AUTOMATON_LEASE_TTL` says otherwise.
pub(super) const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// The shortest lease `AUTOMATON_LEASE_TTL` may ask for.
const MIN_TTL: Duration = Duration::from_secs(1);

/// The lease's length: `AUTOMATON_LEASE_TTL` (a duration, at least 1s),
/// else [`DEFAULT_TTL`].
pub(super) fn ttl() -> Duration {
    std::env::var("AUTOMATON_LEASE_TTL")
        .ok()
        .and_then(|v| crate::duration::parse(&v).ok())
        .map_or(DEFAULT_TTL, |d| d.max(MIN_TTL))
}

/// Takes the lease of loop `name` for `me`, if it may be taken: no lease,
/// one run out or let go by the server's clock, or one whose holder is a
/// process this one can see (same machine, boot and PID namespace) that
/// is gone (its step died with it). Returns the new fence and an instant
/// before the server set the expiry, or `None` when a live lease stands.
/// Call it holding the loop's advisory lock, or having seen no live lease:
/// the upsert alone decides between takers.
pub(super) fn take(
    client: &mut Client,
    name: &str,
    me: &Holder,
    ttl: Duration,
) -> Result<Option<(i64, Instant)>, PgError> {
    if let Some(taken) = upsert(client, name, me, ttl, None)? {
        return Ok(Some(taken));
    }
    let row = client.query_opt(
        "SELECT fence, process FROM leases WHERE loop = $1 AND expires_at > clock_timestamp()",
        &[&name],
    )?;
    let Some(row) = row else {
        // Run out since the first look.
        return upsert(client, name, me, ttl, None);
    };
    if row.get::<_, Option<String>>(1).is_some_and(|p| gone(&p)) {
        return upsert(client, name, me, ttl, Some(row.get(0)));
    }
    Ok(None)
}

/// Process `pid` of this machine as a lease names its holder:
/// `<machine-id> <boot-id> <pid namespace> <pid> <start>`; `None` where
/// `/proc` or the machine id cannot say.
fn process(pid: u32) -> Option<String> {
    let start = crate::procfs::stat(i32::try_from(pid).ok()?)?.start;
    Some(format!(
        "{} {} {} {pid} {start}",
        crate::procfs::machine_id()?,
        crate::procfs::boot_id()?,
        crate::procfs::pid_namespace()?
    ))
}

/// Whether the lease holder `named` (as [`process`] writes it) is known
/// to be gone: a process of this machine's earlier boot, or one of this
/// boot and PID namespace that no longer runs (its pid gone or reused).
/// A holder of another machine, or of a namespace this one cannot see
/// into, is taken at its word until its lease runs out.
fn gone(named: &str) -> bool {
    let f: Vec<&str> = named.split(' ').collect();
    let ([machine, boot, ns, pid, start], Some(mine)) = (f.as_slice(), crate::procfs::machine_id()) else {
        return false;
    };
    if *machine != mine {
        return false;
    }
    if Some(*boot) != crate::procfs::boot_id() {
        return true;
    }
    if Some(*ns) != crate::procfs::pid_namespace() {
        return false;
    }
    let (Ok(pid), Ok(start)) = (pid.parse::<i32>(), start.parse::<u64>()) else {
        return false;
    };
    crate::procfs::stat(pid).is_none_or(|s| s.start != start)
}

/// The lease row made or taken over for `me` with the next fence, when it
/// has run out or holds the fence `dead` (a holder known to be gone).
fn upsert(
    client: &mut Client,
    name: &str,
    me: &Holder,
    ttl: Duration,
    dead: Option<i64>,
) -> Result<Option<(i64, Instant)>, PgError> {
    let sent = Instant::now();
    let row = client.query_opt(
        "INSERT INTO leases AS l (loop, fence, pid, host, expires_at, process)
         VALUES ($1, 1, $2, $3, clock_timestamp() + $4::float8 * interval '1 second', $6)
         ON CONFLICT (loop) DO UPDATE SET fence = l.fence + 1, pid = EXCLUDED.pid,
             host = EXCLUDED.host, expires_at = EXCLUDED.expires_at, process = EXCLUDED.process
         WHERE l.expires_at <= clock_timestamp() OR l.fence = $5
         RETURNING fence",
        &[
            &name,
            &i64::from(me.pid),
            &me.host,
            &ttl.as_secs_f64(),
            &dead.unwrap_or(0),
            &process(me.pid),
        ],
    )?;
    Ok(row.map(|r| (r.get(0), sent)))
}

/// Inside a commit's transaction: whether the lease still holds `fence`
/// and has not run out, locking its row until the transaction ends, so no
/// one takes the lock between this check and the commit.
pub(super) fn fenced(tx: &mut Transaction<'_>, name: &str, fence: i64) -> Result<bool, PgError> {
    tx.query_opt(
        "SELECT 1 FROM leases WHERE loop = $1 AND fence = $2 AND expires_at > clock_timestamp() FOR UPDATE",
        &[&name, &fence],
    )
    .map(|r| r.is_some())
}

/// The renewals of every lease this process holds in one store: every
/// quarter of a lease, one statement renews them all, on one connection
/// kept for it (made anew, within the quarter, when there is none or it
/// broke; a renewal still waiting on the server is left to itself, and
/// the next one makes a connection of its own).
#[derive(Clone)]
pub(super) struct Renewals(Arc<Renewer>);

struct Renewer {
    connector: Connector,
    /// The leases held, as the renewals see them: gone once let go.
    leases: Mutex<Vec<Weak<Shared>>>,
    /// A lease was added: the renewing thread starts its round.
    added: Condvar,
    /// The renewals' connection, while no renewal is using it.
    conn: Mutex<Option<Client>>,
    /// Whether the renewing thread runs.
    running: Mutex<bool>,
}

impl Renewals {
    pub(super) fn new(connector: Connector) -> Renewals {
        Renewals(Arc::new(Renewer {
            connector,
            leases: Mutex::new(Vec::new()),
            added: Condvar::new(),
            conn: Mutex::new(None),
            running: Mutex::new(false),
        }))
    }

    /// Renews `lease` with the others from now on, starting the renewing
    /// thread if it does not run; false when it cannot be started.
    fn add(&self, lease: &Arc<Shared>) -> bool {
        relock(&self.0.leases).push(Arc::downgrade(lease));
        self.0.added.notify_all();
        let mut running = relock(&self.0.running);
        if *running {
            return true;
        }
        let renewer = Arc::clone(&self.0);
        let spawned = std::thread::Builder::new()
            .name("lease-renewals".into())
            .spawn(move || renewer.run());
        *running = spawned.is_ok();
        *running
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Renewer {
    /// The renewing thread: while leases are held, a round every quarter
    /// of the shortest of them, each round on a thread of its own.
    fn run(self: Arc<Self>) {
        loop {
            let every = {
                let mut leases = relock(&self.leases);
                loop {
                    leases.retain(|l| l.upgrade().is_some_and(|l| !l.lock().stopped));
                    if let Some(ttl) = leases.iter().filter_map(|l| Some(l.upgrade()?.ttl)).min() {
                        break ttl / 4;
                    }
                    leases = self
                        .added
                        .wait(leases)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            };
            std::thread::sleep(every);
            let held: Vec<Arc<Shared>> = relock(&self.leases).iter().filter_map(Weak::upgrade).collect();
            if held.is_empty() {
                continue;
            }
            let round = Arc::clone(&self);
            let spawned = std::thread::Builder::new()
                .name("lease-renewal".into())
                .spawn(move || round.renew(&held, every));
            if let Err(e) = spawned {
                tracing::debug!("cannot start a lease renewal: {e}");
            }
        }
    }

    /// The renewals' connection, made within `bound`, which the server's
    /// `idle_session_timeout` does not end between rounds.
    fn connect(&self, bound: Duration) -> Result<Client, String> {
        let mut client = self
            .connector
            .connect_within(bound)
            .map_err(|e| format!("cannot connect: {e}"))?;
        client
            .batch_execute(super::NEVER_IDLE_OUT)
            .map_err(|e| crate::error::with_causes(&e))?;
        Ok(client)
    }

    /// One round: every lease in `held` renewed in one statement, on the
    /// renewals' connection (made anew, within `bound`, when there is none
    /// or it broke); each lease told what became of it.
    fn renew(&self, held: &[Arc<Shared>], bound: Duration) {
        let kept = relock(&self.conn).take();
        let mut client = match kept.filter(|c| !c.is_closed()) {
            Some(c) => c,
            None => match self.connect(bound) {
                Ok(c) => c,
                Err(why) => return held.iter().for_each(|l| l.failed(why.clone())),
            },
        };
        let names: Vec<&str> = held.iter().map(|l| l.name.as_str()).collect();
        let fences: Vec<i64> = held.iter().map(|l| l.fence).collect();
        let ttls: Vec<f64> = held.iter().map(|l| l.ttl.as_secs_f64()).collect();
        let sent = Instant::now();
        let renewed = client.query(
            "UPDATE leases l SET expires_at = clock_timestamp() + r.ttl * interval '1 second'
             FROM unnest($1::text[], $2::int8[], $3::float8[]) AS r(loop, fence, ttl)
             WHERE l.loop = r.loop AND l.fence = r.fence AND l.expires_at > clock_timestamp()
             RETURNING l.loop, l.fence",
            &[&names, &fences, &ttls],
        );
        match renewed {
            Ok(rows) => {
                let kept: Vec<(String, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
                for lease in held {
                    let ours = kept.iter().any(|(n, f)| *n == lease.name && *f == lease.fence);
                    lease.answered(ours, sent);
                }
                *relock(&self.conn) = Some(client);
            }
            Err(e) => {
                let why = crate::error::with_causes(&e);
                for l in held {
                    l.failed(why.clone());
                }
            }
        }
    }
}

/// A held lease, renewed until dropped; [`Lease::watch`] says when it is lost.
pub(super) struct Lease {
    shared: Arc<Shared>,
}

struct Shared {
    name: String,
    fence: i64,
    ttl: Duration,
    watch: LockWatch,
    state: Mutex<State>,
    wake: Condvar,
}

struct State {
    /// When the last renewal that succeeded was sent (at first, the take):
    /// the server's expiry is at least the lease's length past it.
    renewed: Instant,
    /// The server said the lease is no longer this holder's.
    gone: bool,
    /// Why the last renewal failed, for the message when the lease is lost.
    error: Option<String>,
    stopped: bool,
}

impl Lease {
    /// Starts renewing the lease of loop `name` held with `fence`, taken by
    /// a statement sent at `taken`, with the process's other leases.
    pub(super) fn start(name: &str, fence: i64, ttl: Duration, renewals: &Renewals, taken: Instant) -> Lease {
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            fence,
            ttl,
            watch: LockWatch::default(),
            state: Mutex::new(State {
                renewed: taken,
                gone: false,
                error: None,
                stopped: false,
            }),
            wake: Condvar::new(),
        });
        shared.watch.renewed((taken + ttl).checked_sub(ttl / 4).unwrap());
        let watchdog = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("lease-watchdog".into())
            .spawn(move || watchdog.watch_over());
        if let Err(e) = spawned {
            // Nothing would kill the step in time: the lock is as good as lost.
            tracing::warn!("loop {name:?}: cannot watch over the lock's lease ({e}); giving it up");
            shared.watch.lose();
        }
        if !renewals.add(&shared) {
            tracing::warn!("loop {name:?}: cannot start renewing the lock's lease; giving it up");
            shared.watch.lose();
        }
        Lease { shared }
    }

    pub(super) fn watch(&self) -> LockWatch {
        self.shared.watch.clone()
    }

    pub(super) fn fence(&self) -> i64 {
        self.shared.fence
    }

    /// Why the lease is lost, when it is.
    pub(super) fn lost(&self) -> Option<String> {
        self.shared.watch.is_lost().then(|| self.shared.why_lost())
    }
}

impl Lease {
    /// Stops renewing: the holder is letting the lease go.
    pub(super) fn stop(&self) {
        self.shared.lock().stopped = true;
        self.shared.wake.notify_all();
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The watchdog: declares the lock lost when the server said so or
    /// three quarters of the lease have passed since the last renewal that
    /// succeeded was sent. It never waits on the server.
    fn watch_over(self: Arc<Self>) {
        let every = self.ttl / 4;
        let mut state = self.lock();
        loop {
            if state.stopped {
                return;
            }
            let now = Instant::now();
            let kill_at = (state.renewed + self.ttl).checked_sub(every).unwrap();
            if state.gone || now >= kill_at {
                drop(state);
                tracing::warn!(
                    "loop {:?}: the lock is lost ({}); stopping what runs under it",
                    self.name,
                    self.why_lost()
                );
                self.watch.lose();
                return;
            }
            state = self
                .wake
                .wait_timeout(state, kill_at.saturating_duration_since(now))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// A round's answer for this lease: renewed (`ours`) by a statement
    /// sent at `sent`, or no longer this holder's.
    fn answered(&self, ours: bool, sent: Instant) {
        let mut state = self.lock();
        if !ours {
            state.gone = true;
            drop(state);
            self.wake.notify_all();
            return;
        }
        state.renewed = state.renewed.max(sent);
        state.error = None;
        let kill_at = (state.renewed + self.ttl).checked_sub(self.ttl / 4).unwrap();
        drop(state);
        self.watch.renewed(kill_at);
    }

    fn failed(&self, why: String) {
        tracing::debug!("loop {:?}: the lock's lease was not renewed: {why}", self.name);
        self.lock().error = Some(why);
    }

    fn why_lost(&self) -> String {
        let state = self.lock();
        if state.gone {
            return "its lease ran out or was taken over, the server says".to_owned();
        }
        let since = crate::duration::format(Duration::from_secs(state.renewed.elapsed().as_secs()));
        match &state.error {
            Some(e) => format!("its lease was last renewed {since} ago; the last renewal failed: {e}"),
            None => format!("its lease was last renewed {since} ago; no renewal has been answered since"),
        }
    }
}
