//! The `backoff` stock gate as a component: glue only; the logic and its tests
//! are in `gate_common::backoff`.

gate_common::export_gate!(gate_common::backoff::Backoff);
