//! The daemon's timer queue: a min-heap of (due time, loop) with lazy
//! invalidation. Rescheduling a loop pushes a new entry and bumps the loop's
//! generation; the old entry is dropped when it surfaces. Taking the next due
//! loop costs O(log n) in the loops known, so the dispatcher's work grows
//! with the ticks it fires, not with the loops it knows.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::HashMap;

use jiff::Timestamp;

/// Due times of keys `K`, soonest first.
#[derive(Debug)]
pub(super) struct Queue<K> {
    heap: BinaryHeap<Reverse<(Timestamp, u64, K)>>,
    /// The live generation of each key; an entry of another is stale.
    live: HashMap<K, u64>,
    next_generation: u64,
}

impl<K: Clone + Ord + std::hash::Hash> Default for Queue<K> {
    fn default() -> Self {
        Queue {
            heap: BinaryHeap::new(),
            live: HashMap::new(),
            next_generation: 0,
        }
    }
}

impl<K: Clone + Ord + std::hash::Hash> Queue<K> {
    /// How many keys are due at some time.
    pub(super) fn len(&self) -> usize {
        self.live.len()
    }

    /// `key` is due at `at`, replacing any earlier due time of it.
    pub(super) fn set(&mut self, key: K, at: Timestamp) {
        self.next_generation += 1;
        let generation = self.next_generation;
        self.live.insert(key.clone(), generation);
        self.heap.push(Reverse((at, generation, key)));
        self.compact();
    }

    /// `key` is not due at all (running, unscheduled or gone).
    pub(super) fn unset(&mut self, key: &K) {
        self.live.remove(key);
        self.compact();
    }

    /// The soonest live due time and its key.
    pub(super) fn peek(&mut self) -> Option<(Timestamp, &K)> {
        self.drop_stale();
        self.heap.peek().map(|Reverse((t, _, k))| (*t, k))
    }

    /// Takes the soonest key if it is due at or before `now`.
    pub(super) fn pop_due(&mut self, now: Timestamp) -> Option<(Timestamp, K)> {
        self.drop_stale();
        match self.heap.peek() {
            Some(Reverse((t, _, _))) if *t <= now => {
                let Reverse((t, _, k)) = self.heap.pop()?;
                self.live.remove(&k);
                Some((t, k))
            }
            _ => None,
        }
    }

    /// Every live (key, due time), in no order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&K, Timestamp)> {
        self.heap
            .iter()
            .filter(|Reverse((_, g, k))| self.live.get(k) == Some(g))
            .map(|Reverse((t, _, k))| (k, *t))
    }

    fn drop_stale(&mut self) {
        while let Some(Reverse((_, g, k))) = self.heap.peek() {
            if self.live.get(k) == Some(g) {
                break;
            }
            self.heap.pop();
        }
    }

    /// Rebuilds the heap when stale entries outnumber live ones, so a loop
    /// rescheduled often (or many removed) never grows it without bound.
    fn compact(&mut self) {
        if self.heap.len() > 64 && self.heap.len() > 2 * self.live.len() {
            let live = &self.live;
            self.heap.retain(|Reverse((_, g, k))| live.get(k) == Some(g));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: u64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s as i64).unwrap()
    }

    #[test]
    fn pops_in_due_order_and_only_when_due() {
        let mut q = Queue::default();
        q.set("b", t(20));
        q.set("a", t(10));
        q.set("c", t(30));
        assert_eq!(q.pop_due(t(5)), None);
        assert_eq!(q.pop_due(t(25)), Some((t(10), "a")));
        assert_eq!(q.pop_due(t(25)), Some((t(20), "b")));
        assert_eq!(q.pop_due(t(25)), None);
        assert_eq!(q.peek(), Some((t(30), &"c")));
        assert_eq!(q.iter().count(), 1);
    }

    #[test]
    fn a_rescheduled_or_removed_key_leaves_no_ghost() {
        let mut q = Queue::default();
        q.set("a", t(10));
        q.set("a", t(40));
        q.set("b", t(20));
        q.unset(&"b");
        assert_eq!(q.pop_due(t(30)), None);
        assert_eq!(q.iter().collect::<Vec<_>>(), [(&"a", t(40))]);
        assert_eq!(q.pop_due(t(40)), Some((t(40), "a")));
        assert_eq!(q.pop_due(t(1000)), None);
        assert_eq!(q.iter().count(), 0);
    }

    #[test]
    fn stale_entries_do_not_accumulate() {
        let mut q = Queue::default();
        for i in 0..10_000 {
            q.set(i % 10, t(i));
        }
        assert!(q.heap.len() <= 130, "{}", q.heap.len());
        assert_eq!(q.iter().count(), 10);
    }
}
