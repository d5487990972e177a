//! The `context-floor` stock gate as a component: glue only; the logic and its tests
//! are in `gate_common::context_floor`.

gate_common::export_gate!(gate_common::context_floor::ContextFloor);
