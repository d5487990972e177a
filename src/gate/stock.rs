//! The stock gates: components built from `gates/` and embedded in the
//! binary, loaded with `stock = "NAME"` in loop.toml or `stock:NAME` on the
//! command line.

use std::sync::OnceLock;

/// A gate shipped inside the binary.
#[derive(Debug, Clone, Copy)]
pub struct StockGate {
    pub name: &'static str,
    /// The component, as built into `gates/dist/<name>.wasm`.
    pub bytes: &'static [u8],
}

impl StockGate {
    /// The component's sha256, hashed once per process rather than at
    /// every load (a daemon loads a loop's gates at each of its ticks).
    pub fn sha256(&self) -> String {
        static HASHES: [OnceLock<String>; COUNT] = [const { OnceLock::new() }; COUNT];
        let hash = || super::cache::sha256_hex(self.bytes);
        match STOCK.iter().position(|g| std::ptr::eq(g.bytes, self.bytes)) {
            Some(i) => HASHES[i].get_or_init(hash).clone(),
            None => hash(),
        }
    }
}

macro_rules! stock {
    ($name:literal) => {
        StockGate {
            name: $name,
            bytes: include_bytes!(concat!("../../gates/dist/", $name, ".wasm")),
        }
    };
}

const COUNT: usize = 8;

static STOCK: [StockGate; COUNT] = [
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
    &STOCK
}

/// The stock gate with this name.
pub fn find(name: &str) -> Option<&'static StockGate> {
    STOCK.iter().find(|g| g.name == name)
}
