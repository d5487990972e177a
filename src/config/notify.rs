//! `[notify]` in loop.toml, and the URLs it and `[server]` hold.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use super::{CommandLine, Dur};

/// What a notification is about (`[notify] on`, and the `event` it says).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A tick left the loop awaiting approval (once, when the wait starts).
    Await,
    /// The loop halted.
    Halt,
    /// The loop completed.
    Complete,
    /// A tick failed after one that had not: the first of a run of failures.
    Failure,
    /// Someone paused, resumed, approved, rejected or cancelled the loop.
    Operator,
    /// A shadow gate disagreed with the live side for the first time.
    Shadow,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Await => "await",
            Kind::Halt => "halt",
            Kind::Complete => "complete",
            Kind::Failure => "failure",
            Kind::Operator => "operator",
            Kind::Shadow => "shadow",
        }
    }
}

/// `[notify]`: a command run and a webhook called when something happens
/// to the loop that its people act on (docs/notify.md).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawNotify")]
pub struct Notify {
    /// An argv array, or a string run by `sh -c`.
    pub command: Option<CommandLine>,
    /// How long the command may run before it is killed (default 1m).
    pub timeout: Option<Dur>,
    /// What is notified (default await, halt and complete).
    pub on: Vec<Kind>,
    /// Where the notice is POSTed as JSON.
    pub webhook: Option<HttpUrl>,
    /// The most a webhook's delivery takes, every attempt included (default 10s).
    pub webhook_timeout: Option<Dur>,
}

/// The most `webhook_timeout` may be.
pub(crate) const MAX_WEBHOOK_TIMEOUT: std::time::Duration = std::time::Duration::from_mins(1);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNotify {
    command: Option<CommandLine>,
    timeout: Option<Dur>,
    on: Option<Vec<Kind>>,
    webhook: Option<HttpUrl>,
    webhook_timeout: Option<Dur>,
}

impl TryFrom<RawNotify> for Notify {
    type Error = String;
    fn try_from(r: RawNotify) -> Result<Self, String> {
        if r.command.is_none() && r.webhook.is_none() {
            return Err("[notify] needs a `command`, a `webhook` or both".into());
        }
        if r.webhook_timeout.is_some_and(|d| d.0.is_zero()) {
            return Err("`webhook_timeout` must be greater than zero".into());
        }
        if let Some(d) = r.webhook_timeout.filter(|d| d.0 > MAX_WEBHOOK_TIMEOUT) {
            return Err(format!(
                "`webhook_timeout` is {}, past the most a delivery may take ({}): a receiver \
                 that hangs would hold a delivery thread that long",
                crate::duration::format(d.0),
                crate::duration::format(MAX_WEBHOOK_TIMEOUT)
            ));
        }
        let mut on =
            r.on.unwrap_or_else(|| vec![Kind::Await, Kind::Halt, Kind::Complete]);
        on.dedup();
        Ok(Notify {
            command: r.command,
            timeout: r.timeout,
            on,
            webhook: r.webhook,
            webhook_timeout: r.webhook_timeout,
        })
    }
}

/// An `http://` or `https://` URL with a host. It may carry a secret (a
/// password, a token in its query): it is shown only [`HttpUrl::masked`].
#[derive(Clone, PartialEq, Eq)]
pub struct HttpUrl(String);

impl HttpUrl {
    pub fn parse(text: &str) -> Result<HttpUrl, String> {
        let text = text.trim();
        let rest = text
            .strip_prefix("https://")
            .or_else(|| text.strip_prefix("http://"))
            .ok_or_else(|| format!("{:?} is not an http:// or https:// URL", mask(text)))?;
        let host = authority(rest).rsplit('@').next().unwrap_or("");
        if host.is_empty() || host.starts_with(':') {
            return Err(format!("{:?} names no host", mask(text)));
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("{:?} holds a space or a control character", mask(text)));
        }
        Ok(HttpUrl(text.to_owned()))
    }

    /// The URL, secrets included: for the request only.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The URL as logs and messages show it: without its user and
    /// password, and with its query as `?…`.
    pub fn masked(&self) -> String {
        mask(&self.0)
    }

    /// `text` (an error a client gave) with this URL and its user and
    /// password masked wherever it quotes them.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut text = text.replace(&self.0, &self.masked());
        let rest = self.0.split_once("://").map_or("", |(_, r)| r);
        if let Some((userinfo, _)) = authority(rest).rsplit_once('@')
            && !userinfo.is_empty()
        {
            text = text.replace(userinfo, "…");
        }
        text
    }
}

impl fmt::Debug for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HttpUrl({})", self.masked())
    }
}

impl<'de> Deserialize<'de> for HttpUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        HttpUrl::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

/// The authority of a URL's text after its scheme: up to the path, the
/// query or the fragment.
fn authority(rest: &str) -> &str {
    rest.split(['/', '?', '#']).next().unwrap_or("")
}

/// `text` without the user and password of its authority, and with its
/// query and fragment cut to `?…`.
fn mask(text: &str) -> String {
    let (scheme, rest) = match text.split_once("://") {
        Some((s, r)) => (format!("{s}://"), r),
        None => (String::new(), text),
    };
    let auth = authority(rest);
    let host = match auth.rsplit_once('@') {
        Some((_, host)) => format!("…@{host}"),
        None => auth.to_owned(),
    };
    let tail = &rest[auth.len()..];
    let path = tail.split(['?', '#']).next().unwrap_or("");
    let cut = if path.len() < tail.len() { "?…" } else { "" };
    format!("{scheme}{host}{path}{cut}")
}

/// `[server]`, in loop.toml or the root's automaton.toml: where people
/// reach the console, for the links notifications carry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    /// The console's address, e.g. `https://automaton.example.com`.
    #[serde(default)]
    pub url: Option<HttpUrl>,
}

/// The console's page where loop `name`'s pending await is reviewed.
pub fn review_url(server: &HttpUrl, name: &str) -> String {
    format!("{}/loops/{name}/review", server.as_str().trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked() {
        let url = HttpUrl::parse("https://bot:s3cret@hooks.example.com:8443/in/x?token=abc#f").unwrap();
        assert_eq!(url.masked(), "https://…@hooks.example.com:8443/in/x?…");
        assert!(!format!("{url:?}").contains("s3cret"));
        let plain = HttpUrl::parse("http://127.0.0.1:9/hook").unwrap();
        assert_eq!(plain.masked(), "http://127.0.0.1:9/hook");
        let said =
            url.scrub("failed: https://bot:s3cret@hooks.example.com:8443/in/x?token=abc#f; bot:s3cret");
        assert!(!said.contains("s3cret") && !said.contains("abc"), "{said}");
    }

    #[test]
    fn only_http_urls_with_a_host_are_taken() {
        assert!(HttpUrl::parse("ftp://x/y").unwrap_err().contains("not an http"));
        assert!(HttpUrl::parse("https:///path").unwrap_err().contains("no host"));
        assert!(
            HttpUrl::parse("https://user:pw@/p")
                .unwrap_err()
                .contains("no host")
        );
        assert!(HttpUrl::parse("https://a b/").unwrap_err().contains("space"));
        assert!(
            !HttpUrl::parse("mailto:ann:pw@example.com")
                .unwrap_err()
                .contains("pw")
        );
    }

    #[test]
    fn the_review_link_is_under_the_server() {
        let server = HttpUrl::parse("https://console.example.com/").unwrap();
        assert_eq!(
            review_url(&server, "agent"),
            "https://console.example.com/loops/agent/review"
        );
    }
}
