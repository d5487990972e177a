//! The `budget` stock gate as a component: glue only; the logic and its tests
//! are in `gate_common::budget`.

gate_common::export_gate!(gate_common::budget::Budget);
