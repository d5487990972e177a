//! The `max-failures` stock gate as a component: glue only; the logic and its tests
//! are in `gate_common::max_failures`.

gate_common::export_gate!(gate_common::max_failures::MaxFailures);
