//! The stock gates: components built from `gates/` and embedded in the
//! binary, loaded with `stock = "NAME"` in loop.toml or `stock:NAME` on the
//! command line.

/// A gate shipped inside the binary.
#[derive(Debug, Clone, Copy)]
pub struct StockGate {
    pub name: &'static str,
    /// The component as built into `gates/dist/<name>.wasm`, deflated (raw
    /// DEFLATE) by the build: a component is read only to compile it, when
    /// the cache does not hold it yet.
    deflated: &'static [u8],
    /// The component's length.
    size: usize,
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

    /// The component's length in bytes.
    pub fn size(&self) -> u64 {
        self.size as u64
    }

    /// The component, as built into `gates/dist/<name>.wasm`.
    pub fn component(&self) -> Vec<u8> {
        // The build deflated these very bytes: inflating them cannot fail
        // short of a corrupt binary.
        miniz_oxide::inflate::decompress_to_vec_with_limit(self.deflated, self.size).unwrap_or_else(|e| {
            panic!(
                "the stock gate {} embedded in this binary is corrupt: {e}",
                self.name
            )
        })
    }
}

macro_rules! stock {
    ($name:literal) => {
        StockGate {
            name: $name,
            deflated: include_bytes!(concat!(env!("OUT_DIR"), "/stock/", $name, ".wasm.deflate")),
            size: include!(concat!(env!("OUT_DIR"), "/stock/", $name, ".size")),
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
            let component = g.component();
            assert_eq!(
                g.sha256(),
                super::super::cache::sha256_hex(&component),
                "{}",
                g.name
            );
            assert_eq!(g.size(), component.len() as u64, "{}", g.name);
            let dist = std::fs::read(format!(
                "{}/gates/dist/{}.wasm",
                env!("CARGO_MANIFEST_DIR"),
                g.name
            ))
            .unwrap();
            assert_eq!(component, dist, "{}", g.name);
            assert!(
                g.deflated.len() < component.len(),
                "{} is embedded deflated",
                g.name
            );
        }
    }
}
