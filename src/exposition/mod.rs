//! `/metrics`: the root's loops in the Prometheus text format, or in
//! OpenMetrics when the scraper asks for it (docs/metrics.md names each
//! series). `automaton serve` answers it to its viewers and to a scrape
//! token; `automaton daemon --metrics ADDR` answers it from a small
//! listener of its own (`listen`), with the daemon's figures added
//! (`daemon`).
//!
//! Every figure is read at scrape time from the store, through the core's
//! views ([`crate::ops::views::status::read_all`]) and the loop's store
//! (its state, ledger of firings and history), so both stores answer the
//! same series, and on PostgreSQL every host that scrapes reads the whole
//! team's figures. What the history gives is kept between scrapes for a
//! loop whose state's version has not moved (`figures::Cache`). A figure
//! nothing measured is left out, never written as 0: a loop that never
//! fired has no last-firing series. The encoding is the official Rust
//! client's (`prometheus-client`), from a collector over the figures read
//! (`encode`).

pub(crate) mod daemon;
mod encode;
pub(crate) mod figures;
pub(crate) mod listen;

use crate::error::Result;
use crate::ops::Ctx;

pub(crate) use crate::config::scrape::ScrapeAccess;
pub(crate) use daemon::DaemonFigures;
pub(crate) use figures::Cache;

/// The two text formats a scraper may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// The Prometheus text format, version 0.0.4 (the default).
    Prometheus,
    /// OpenMetrics 1.0 text, asked for with `Accept: application/openmetrics-text`.
    OpenMetrics,
}

impl Format {
    /// The format an `Accept` header asks for: OpenMetrics when it names
    /// it (with a nonzero weight), else Prometheus's text format.
    pub(crate) fn from_accept(accept: Option<&str>) -> Format {
        let asks = accept.is_some_and(|a| {
            a.split(',').any(|part| {
                let mut params = part.split(';').map(str::trim);
                let media = params.next().unwrap_or("");
                let refused = params
                    .filter_map(|p| p.strip_prefix("q="))
                    .any(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0));
                media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
            })
        });
        match asks {
            true => Format::OpenMetrics,
            false => Format::Prometheus,
        }
    }

    /// The `Content-Type` of an answer in this format.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The exposition of every loop the context's actor may see (a scrape
/// token's or a daemon's: all of them), with a daemon's own figures when
/// given, in `format`.
pub(crate) fn render(
    ctx: &Ctx,
    cache: &Cache,
    daemon: Option<&DaemonFigures>,
    format: Format,
) -> Result<String> {
    let loops = figures::read(ctx, cache)?;
    let daemon = daemon.map(DaemonFigures::read);
    Ok(encode::encode(loops, daemon, format))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_is_given_only_to_who_asks_for_it() {
        assert_eq!(Format::from_accept(None), Format::Prometheus);
        assert_eq!(Format::from_accept(Some("text/plain")), Format::Prometheus);
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::from_accept(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(
            Format::from_accept(Some("application/openmetrics-text; q=0")),
            Format::Prometheus
        );
    }

    #[test]
    fn the_scrape_token_is_checked_against_its_digest() {
        use sha2::Digest;
        let hex: String = sha2::Sha256::digest(b"s3cret")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let access = ScrapeAccess {
            token_sha256: Some(hex),
            anonymous: false,
        };
        assert!(access.token_matches(Some("Bearer s3cret")));
        assert!(!access.token_matches(Some("Bearer s3cre")));
        assert!(!access.token_matches(None));
        assert!(!ScrapeAccess::default().token_matches(Some("Bearer s3cret")));
    }
}
