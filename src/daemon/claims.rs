//! Claimed firings, for a store that daemons on several hosts share
//! (docs/postgres.md, "Several hosts"). The store keeps each scheduled
//! loop's next firing; a daemon with idle workers claims the firings due
//! (each offered to one daemon), runs their ticks, and writes each loop's
//! next firing as it lets the claim go. So no daemon locks a loop to learn
//! another ran the firing, and a daemon that dies leaves its claims to run
//! out, by the store's clock, for the others. The daemon still reads every
//! schedule (the first daemon to read one writes its first firing) and
//! computes each next firing; its own timer queue stays empty.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::dispatch::{Dispatcher, reschedule};
use super::due::jittered;
use super::workers::{Handoff, Job};
use super::{CLAIM_GATHER, MAX_SLEEP};
use crate::store::{Claims, Firing, Offer};
use crate::tick::Cancel;

/// One daemon's claims: who it is to the store, and when it next asks.
pub(super) struct Claimant {
    /// This daemon among all that share the store: its host, pid and start.
    me: String,
    host: String,
    /// When the store is next asked for due firings.
    next_claim: Instant,
    /// When the claims of running ticks are next renewed.
    next_renew: Instant,
    /// Ticks ended whose claim was not let go (the server did not answer,
    /// or its answer was lost), each with the next firing to write: tried
    /// again with each renewal until the server answers.
    unsettled: BTreeMap<String, Option<Firing>>,
    /// A claim's answer was lost: the store may hold claims of this daemon
    /// it never learnt of, let go by the next renewal the server answers.
    unsure: bool,
}

impl Claimant {
    pub(super) fn new() -> Claimant {
        let host = crate::who::host();
        Claimant {
            me: format!("{host} pid {} since {}", std::process::id(), crate::clock::now()),
            host,
            next_claim: Instant::now(),
            next_renew: Instant::now(),
            unsettled: BTreeMap::new(),
            unsure: false,
        }
    }
}

impl<'a> Dispatcher<'a> {
    fn claims(&self) -> Option<&'a dyn Claims> {
        let stores: &'a crate::store::Stores = self.stores;
        self.claimant.as_ref().and(stores.claims())
    }

    /// When the store is next asked for due firings, if it is.
    pub(super) fn next_claim(&self) -> Option<Instant> {
        self.claimant.as_ref().map(|c| c.next_claim)
    }

    /// Writes the first firing of each loop in `names` (their schedule is
    /// new to this daemon) unless the store has one for that schedule,
    /// all in one statement, and asks for due firings at once.
    pub(super) fn offer(&mut self, names: &[Arc<str>]) {
        let Some(claims) = self.claims() else { return };
        let mut offers: Vec<Offer> = names
            .iter()
            .filter_map(|name| {
                let entry = self.loops.get(name)?;
                let (Some((s, _)), Some(nominal)) = (&entry.schedule, entry.nominal) else {
                    return None;
                };
                Some(Offer {
                    name: name.to_string(),
                    cadence: format!("{s:?} on {:?}", entry.hosts),
                    hosts: entry.hosts.clone(),
                    first: Firing {
                        nominal,
                        due: jittered(nominal, s.jitter.map(|j| j.0)),
                    },
                })
            })
            .collect();
        offers.sort_by(|a, b| a.name.cmp(&b.name));
        if !offers.is_empty()
            && let Err(e) = claims.offer(&offers)
        {
            super::refused::warn(&e);
        }
        for name in names {
            self.queue.unset(name);
        }
        self.set_next_claim(Instant::now());
    }

    /// Claims as many due firings as workers are idle, when it is time to
    /// ask, and hands them out. With fewer due than asked for, the store
    /// is asked again when the next comes due, or within a second.
    pub(super) fn dispatch_claimed(&mut self, handoff: &Handoff) {
        self.review_try();
        let (Some(claims), Some(c)) = (self.claims(), self.claimant.as_ref()) else {
            return;
        };
        let free = self.room();
        if free == 0 || Instant::now() < c.next_claim {
            return;
        }
        let (me, host) = (c.me.clone(), c.host.clone());
        let asked = Instant::now();
        let claimed = claims.claim(&me, free, &host);
        self.figures.claimed_in(asked.elapsed());
        let now = crate::clock::now();
        let mut next = Instant::now() + MAX_SLEEP;
        let claimed = match claimed {
            Ok(claimed) => claimed,
            Err(e @ crate::error::Error::SchemaTooNew { .. }) => {
                // Run on, it would write what the newer binaries may not
                // read: no tick starts; the daemon stops as on a signal,
                // and ends with the error.
                self.fatal = Some(e);
                return;
            }
            Err(e) if crate::store::refuses_connections(&e) => {
                self.connection_answer(None, Some(&e));
                return;
            }
            Err(e) => {
                super::refused::warn(&e);
                self.set_next_claim(next);
                if let Some(c) = &mut self.claimant {
                    c.unsure = true;
                }
                return;
            }
        };
        if claimed.loops.len() >= free {
            next = Instant::now();
        } else if let Some(at) = claimed.next {
            let until = Duration::try_from(at.duration_since(now)).unwrap_or_default();
            next = next.min(Instant::now() + until + CLAIM_GATHER);
        }
        self.set_next_claim(next);
        for (name, nominal) in claimed.loops {
            // Claimed again: a settling still to be tried is past.
            if let Some(c) = &mut self.claimant {
                c.unsettled.remove(&name);
            }
            let known = self.loops.get_key_value(name.as_str());
            let Some(name) = known
                .filter(|(_, e)| e.schedule.is_some())
                .map(|(n, _)| Arc::clone(n))
            else {
                self.put_back(claims, &me, &name, nominal);
                continue;
            };
            if let Some(entry) = self.loops.get_mut(&name) {
                entry.fired = Some(nominal);
                entry.started = Some(now);
            }
            // A loop its user may not tick: recorded, and its next firing
            // written, as a tick's would be.
            if let Some(detail) = self.loops.get(&name).and_then(|e| e.refusal(self.stores.me())) {
                self.record(&name, None, |w, at, key| w.of_refused(at, key, detail));
                self.settle(&name);
                continue;
            }
            let lag = Duration::try_from(now.duration_since(nominal)).unwrap_or_default();
            self.lags.add(&name, lag);
            self.ticks += 1;
            let cancel = Cancel::default();
            self.running.insert(Arc::clone(&name), cancel.clone());
            let released = self.awaits.take_released(&name);
            self.started_one(&name);
            handoff.give(Job {
                name,
                cancel,
                ran_since: None,
                released,
            });
        }
    }

    fn set_next_claim(&mut self, at: Instant) {
        if let Some(c) = &mut self.claimant {
            c.next_claim = at;
        }
    }

    /// A firing claimed of a loop this daemon does not schedule: one it
    /// has not listed yet (it is listed again now), one that runs on
    /// other hosts, or one whose config does not read here. Put back for
    /// a rescan later; forgotten when its config reads with no schedule.
    fn put_back(&mut self, claims: &dyn Claims, me: &str, name: &str, nominal: jiff::Timestamp) {
        let unscheduled = self
            .loops
            .get(name)
            .and_then(|e| e.dir.config().ok())
            .is_some_and(|c| c.schedule.is_none());
        let later = crate::clock::now()
            .checked_add(jiff::SignedDuration::try_from(self.opts.rescan).unwrap_or_default())
            .unwrap_or(nominal);
        let next = Firing { nominal, due: later };
        let result = match unscheduled {
            true => claims.withdraw(name),
            false => claims.settle(me, name, Some(next)),
        };
        if let Err(e) = result {
            super::refused::warn(&e);
            self.unsettled(name, (!unscheduled).then_some(next));
        }
        self.scanner.relist();
        self.scanner.now();
    }

    /// A claimed firing's tick ended: the loop's next firing is written
    /// as its claim is let go, and the store is asked for more by the time
    /// that firing falls due (and [`CLAIM_GATHER`]). The store is not asked at once: what else
    /// is due it said at the last claim (a daemon that took all it asked
    /// for asks again at once), and a firing another daemon writes is
    /// seen within [`MAX_SLEEP`], so an empty answer is not paid for at
    /// the end of every tick.
    pub(super) fn settle(&mut self, name: &Arc<str>) {
        let Some(claims) = self.claims() else { return };
        let me = self.claimant.as_ref().map(|c| c.me.clone()).unwrap_or_default();
        let now = crate::clock::now();
        let next = self.loops.get_mut(name).and_then(|entry| {
            reschedule(&mut self.queue, name, entry, now);
            let s = entry.schedule.as_ref().map(|(s, _)| s.jitter.map(|j| j.0));
            entry.nominal.map(|nominal| Firing {
                nominal,
                due: jittered(nominal, s.flatten()),
            })
        });
        self.queue.unset(name);
        let due = next.as_ref().map_or(now, |f| f.due);
        if let Err(e) = claims.settle(&me, name, next) {
            super::refused::warn(&e);
            self.unsettled(name, next);
        }
        let until = Duration::try_from(due.duration_since(now)).unwrap_or_default();
        self.claim_by(Instant::now() + until + CLAIM_GATHER);
    }

    /// Asks the store for due firings by `at`, if not sooner.
    fn claim_by(&mut self, at: Instant) {
        if let Some(c) = &mut self.claimant {
            c.next_claim = c.next_claim.min(at);
        }
    }

    /// A claim not let go when its tick ended, to be settled with `next`
    /// once the server answers.
    fn unsettled(&mut self, name: &str, next: Option<Firing>) {
        if let Some(c) = &mut self.claimant {
            c.unsettled.insert(name.to_owned(), next);
        }
    }

    /// Every quarter of a lease, while a tick runs or the store may hold a
    /// claim of this daemon that no tick runs under: the claims not let go
    /// are settled, then the claims of the ticks running renewed and every
    /// other claim of this daemon let go. So a claim lasts at most one
    /// lease past its tick, whatever answers were lost.
    pub(super) fn renew_claims(&mut self) {
        let Some(claims) = self.claims() else { return };
        let Some(c) = self.claimant.as_ref() else { return };
        let idle = self.running.is_empty() && c.unsettled.is_empty() && !c.unsure;
        if idle || Instant::now() < c.next_renew {
            return;
        }
        let me = c.me.clone();
        let every = claims.claim_ttl() / 4;
        if let Some(c) = &mut self.claimant {
            c.next_renew = Instant::now() + every;
        }
        if let Err(e) = self.settle_unsettled(claims, &me) {
            return super::refused::warn(&e);
        }
        let running: Vec<String> = self
            .running
            .keys()
            .map(std::string::ToString::to_string)
            .collect();
        let unsettled: Vec<String> = self
            .claimant
            .as_ref()
            .map(|c| c.unsettled.keys().cloned().collect())
            .unwrap_or_default();
        match claims.renew(&me, &running, &unsettled) {
            Ok(()) => {
                if let Some(c) = &mut self.claimant {
                    c.unsure = false;
                }
            }
            Err(e) => super::refused::warn(&e),
        }
    }

    /// Settles the claims not let go, in name order, until one fails.
    fn settle_unsettled(&mut self, claims: &dyn Claims, me: &str) -> crate::error::Result<()> {
        let Some(c) = &mut self.claimant else {
            return Ok(());
        };
        while let Some((name, next)) = c.unsettled.pop_first() {
            if let Err(e) = claims.settle(me, &name, next) {
                c.unsettled.insert(name, next);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Fires `name` now through the store (an approval released it), once
    /// for the state `version` that holds the approval. False without
    /// claims: the daemon's own queue fires it.
    pub(super) fn fire_claimed(&mut self, name: &str, version: u64) -> bool {
        let Some(claims) = self.claims() else { return false };
        if let Err(e) = claims.fire_now(name, version) {
            super::refused::warn(&e);
        }
        self.set_next_claim(Instant::now());
        true
    }
}
