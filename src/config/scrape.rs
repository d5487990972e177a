//! automaton.toml's `[metrics]`: who may scrape `/metrics` besides a
//! console's signed-in users (docs/metrics.md, "Who may scrape").

/// Who may scrape `/metrics` besides a console's signed-in users:
/// automaton.toml's `[metrics]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScrapeAccess {
    /// The sha256 (hex) of a token a scraper sends as `Authorization:
    /// Bearer TOKEN`; it reads every loop.
    #[serde(default)]
    pub token_sha256: Option<String>,
    /// Anyone may scrape, with no token (every loop): only when set.
    #[serde(default)]
    pub anonymous: bool,
}

impl ScrapeAccess {
    /// Whether an `Authorization` header's value carries the scrape token.
    pub(crate) fn token_matches(&self, authorization: Option<&str>) -> bool {
        use sha2::Digest;
        let (Some(want), Some(given)) = (&self.token_sha256, authorization.and_then(bearer)) else {
            return false;
        };
        let got = hex(&sha2::Sha256::digest(given.as_bytes()));
        // Both sides are digests of the same length: comparing them gives
        // nothing of the token away.
        got.eq_ignore_ascii_case(want.trim())
    }
}

/// The token of an `Authorization: Bearer TOKEN` header.
pub fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
