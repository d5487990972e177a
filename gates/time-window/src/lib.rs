//! The `time-window` stock gate as a component: glue only; the logic and its tests
//! are in `gate_common::time_window`.

//! Built against 0.3.0 for the host's `in-zone` (its `timezone` param).

gate_common::export_gate!(gate_common::time_window::TimeWindow, v0_3);
