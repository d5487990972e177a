//! The instance pool and the stores gates run in: the engine's settings
//! (a long-lived host allocates instances from a pool of slots that stay
//! mapped between calls), permits over the pool's slots, so a call waits
//! for a free one rather than fail, and one instance in its own store
//! under a call's limits.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use jiff::Timestamp;
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, UpdateDeadline,
};

use super::sandbox::HostState;
use super::world::{Pre, World};
use crate::domain::Limits;

/// A counting semaphore over the instance pool's slots.
pub(crate) struct Slots {
    free: Mutex<usize>,
    freed: std::sync::Condvar,
}

impl Slots {
    /// A pool of `slots` free slots.
    pub(crate) fn new(slots: usize) -> Arc<Slots> {
        Arc::new(Slots {
            free: Mutex::new(slots),
            freed: std::sync::Condvar::new(),
        })
    }

    /// A slot, waiting for one to be free.
    pub(crate) fn take(self: &Arc<Self>) -> Permit {
        let mut free = self
            .free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while *free == 0 {
            free = self
                .freed
                .wait(free)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        *free -= 1;
        Permit(self.clone())
    }

    /// A slot if one is free now.
    pub(crate) fn try_take(self: &Arc<Self>) -> Option<Permit> {
        let mut free = self
            .free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let got = (*free > 0).then(|| *free -= 1);
        got.map(|()| Permit(self.clone()))
    }
}

/// A held slot, given back when dropped.
pub(crate) struct Permit(Arc<Slots>);

impl Drop for Permit {
    fn drop(&mut self) {
        *self
            .0
            .free
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
        self.0.freed.notify_one();
    }
}

/// One instance in its own store: made for a call, or ahead of one. The
/// fields drop in order, so the store gives back its pool slot before the
/// permit says it is free.
pub(crate) struct Instance {
    pub(crate) store: Store<HostState>,
    /// The instantiation's outcome; an error is the call's error.
    pub(crate) made: wasmtime::Result<World>,
    pub(crate) permit: Option<Permit>,
}

impl Instance {
    /// A fresh store under `limits` (the memory cap, and `deadline`, by
    /// which the call must be done) and an instance of the component in it.
    pub(crate) fn new(
        engine: &Engine,
        pre: &Pre,
        limits: &Limits,
        now: Timestamp,
        deadline: Instant,
        permit: Option<Permit>,
    ) -> Instance {
        let mut store = Store::new(engine, HostState::new(limits.memory, now));
        store.limiter(|s| &mut s.budget);
        store.epoch_deadline_callback(|store| {
            Ok(match Instant::now() >= store.data().deadline {
                true => UpdateDeadline::Interrupt,
                false => UpdateDeadline::Continue(1),
            })
        });
        set_deadline(&mut store, deadline);
        let made = pre.instantiate(&mut store);
        Instance { store, made, permit }
    }

    /// Restarts the deadline (a spare's, when a call takes it).
    pub(crate) fn set_deadline(&mut self, deadline: Instant) {
        set_deadline(&mut self.store, deadline);
    }
}

/// The epoch ticker advances the epoch when a running call's deadline
/// passes; the store then checks its own `deadline` (the callback above).
fn set_deadline(store: &mut Store<HostState>, deadline: Instant) {
    store.data_mut().deadline = deadline;
    store.set_epoch_deadline(1);
}

/// Linear memory a pooled slot keeps mapped between calls: its dirty pages
/// are copied back from the component's image (or zeroed) instead of being
/// unmapped, so the next instance does not fault them in again. An
/// interpreter's heap image dirties a few MiB per call.
const KEEP_RESIDENT: usize = 32 << 20;

/// The most core instances one component may have in a pooled slot (an
/// interpreter component has about a dozen), and the most memories and
/// tables (it has two or three: each reserves 4 GiB of address space).
const INSTANCES_PER_COMPONENT: u32 = 64;
const MEMORIES_PER_COMPONENT: u32 = 8;

/// Elements a pooled table may hold (an interpreter's function table holds
/// tens of thousands); growth past it is refused like any other.
const TABLE_ELEMENTS: usize = 1 << 20;

/// The engine's settings. Both kinds of host compile the same code (so they
/// share cached artefacts); a long-lived one allocates instances from a pool
/// of `pooled` slots that stay mapped between calls.
pub(crate) fn config(pooled: Option<u32>) -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    if let Some(slots) = pooled {
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(slots)
            .total_core_instances(slots * INSTANCES_PER_COMPONENT)
            .total_memories(slots * MEMORIES_PER_COMPONENT)
            .total_tables(slots * MEMORIES_PER_COMPONENT)
            .max_core_instances_per_component(INSTANCES_PER_COMPONENT)
            .max_memories_per_component(MEMORIES_PER_COMPONENT)
            .max_tables_per_component(MEMORIES_PER_COMPONENT)
            .max_memories_per_module(MEMORIES_PER_COMPONENT)
            .max_tables_per_module(MEMORIES_PER_COMPONENT)
            .max_core_instance_size(16 << 20)
            .max_component_instance_size(16 << 20)
            // A memory may grow to the wasm32 maximum: the memory budget,
            // not the pool, is the limit a gate meets.
            .max_memory_size(1 << 32)
            .table_elements(TABLE_ELEMENTS)
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(1 << 20)
            .pagemap_scan(Enabled::Auto);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_given_back_when_its_permit_drops() {
        let slots = Slots::new(1);
        let held = slots.take();
        assert!(slots.try_take().is_none());
        drop(held);
        assert!(slots.try_take().is_some());
    }
}
