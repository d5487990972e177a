//! The stock gates: components built from `gates/` and embedded in the
//! binary, loaded with `stock = "NAME"` in loop.toml or `stock:NAME` on the
//! command line.

/// A gate shipped inside the binary.
#[derive(Debug, Clone, Copy)]
pub struct StockGate {
    pub name: &'static str,
    /// The component, as built into `gates/dist/<name>.wasm`.
    pub bytes: &'static [u8],
}

macro_rules! stock {
    ($name:literal) => {
        StockGate {
            name: $name,
            bytes: include_bytes!(concat!("../../gates/dist/", $name, ".wasm")),
        }
    };
}

static STOCK: &[StockGate] = &[
    stock!("approve-every"),
    stock!("max-failures"),
    stock!("context-floor"),
    stock!("budget"),
    stock!("time-window"),
    stock!("max-ticks"),
    stock!("backoff"),
    stock!("no-progress"),
];

/// Every stock gate, in the order `gate list` shows them.
pub fn stock_gates() -> &'static [StockGate] {
    STOCK
}

/// The stock gate with this name.
pub fn find(name: &str) -> Option<&'static StockGate> {
    STOCK.iter().find(|g| g.name == name)
}
