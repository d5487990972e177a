//! The `time-window` stock gate as a component: glue only; the logic and its tests
//! are in `gate_common::time_window`.

gate_common::export_gate!(gate_common::time_window::TimeWindow);
