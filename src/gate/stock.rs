//! The stock gates: components built from `gates/` and embedded in the
//! binary, loaded with `stock = "NAME"` in loop.toml or `stock:NAME` on the
//! command line.

/// A gate shipped inside the binary.
#[derive(Debug, Clone, Copy)]
pub struct StockGate {
    pub name: &'static str,
    /// The component, as built into `gates/dist/<name>.wasm`.
    pub bytes: &'static [u8],
    /// Its sha256, lower-case hex, taken when the binary was built.
    sha256: &'static str,
}

impl StockGate {
    /// The component's sha256: hashed by the build, so no process reads
    /// the embedded component to name it (a cached stock gate is loaded
    /// without touching its bytes).
    pub fn sha256(&self) -> String {
        self.sha256.to_owned()
    }
}

macro_rules! stock {
    ($name:literal) => {
        StockGate {
            name: $name,
            bytes: include_bytes!(concat!("../../gates/dist/", $name, ".wasm")),
            sha256: include_str!(concat!(env!("OUT_DIR"), "/stock/", $name, ".sha256")),
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
pub(super) fn find(name: &str) -> Option<&'static StockGate> {
    STOCK.iter().find(|g| g.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_time_sha256s_are_the_embedded_components() {
        for g in stock_gates() {
            assert_eq!(g.sha256(), super::super::cache::sha256_hex(g.bytes), "{}", g.name);
        }
    }
}
