//! The `no-progress` stock gate as a component: glue only; the logic and its tests
//! are in `gate_common::no_progress`.

gate_common::export_gate!(gate_common::no_progress::NoProgress);
