//! The `approve-every` stock gate as a component: glue only; the logic and its tests
//! are in `gate_common::approve_every`.

gate_common::export_gate!(gate_common::approve_every::ApproveEvery);
