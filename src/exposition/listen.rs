//! `automaton daemon --metrics ADDR`: a small HTTP/1 listener for hosts
//! that run no console. It answers `GET /metrics` (and nothing else), one
//! connection at a time, each bounded: the request's head at most
//! [`MAX_HEAD`] bytes read within [`READ_TIMEOUT`], the answer written
//! within [`WRITE_TIMEOUT`], then the connection closed. It asks for the
//! scrape token when automaton.toml's `[metrics]` sets one; without one
//! it answers anyone only on a loopback address or with `anonymous =
//! true`, and otherwise does not start.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::{Cache, DaemonFigures, Format, ScrapeAccess};
use crate::error::{Error, Result};
use crate::ops::Ctx;
use crate::root::Root;
use crate::store::Stores;

/// The most bytes of a request's head read.
pub(crate) const MAX_HEAD: usize = 8 * 1024;
/// How long a client has to send its request's head.
pub(crate) const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client has to take the answer.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the listener looks whether the daemon stopped.
const STOP_POLL: Duration = Duration::from_millis(250);

/// The listening socket and who it answers.
pub(crate) struct Listener {
    socket: TcpListener,
    access: ScrapeAccess,
}

impl Listener {
    /// Binds `addr` (`HOST:PORT`) for the root's scrapers, refusing an
    /// address others reach when nothing guards it.
    pub(crate) fn bind(addr: &str, access: &ScrapeAccess) -> Result<Listener> {
        let addrs: Vec<SocketAddr> = addr
            .to_socket_addrs()
            .map_err(|source| Error::Listen {
                addr: addr.to_owned(),
                source,
            })?
            .collect();
        let open = access.token_sha256.is_none() && !access.anonymous;
        if open && addrs.iter().any(|a| !a.ip().is_loopback()) {
            return Err(Error::MetricsSetup {
                reason: format!(
                    "{addr} is reached from other hosts, and automaton.toml's [metrics] sets no \
                     token_sha256: set one (scrapers send it as a bearer token), set `anonymous = \
                     true` to answer anyone, or listen on a loopback address"
                ),
            });
        }
        let socket = TcpListener::bind(&addrs[..]).map_err(|source| Error::Listen {
            addr: addr.to_owned(),
            source,
        })?;
        Ok(Listener {
            socket,
            access: access.clone(),
        })
    }

    /// The address it listens on (the port the OS chose for `:0`).
    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.socket.local_addr().ok()
    }

    /// Answers scrapes until `stop` is set.
    pub(crate) fn serve(&self, root: &Root, stores: &Stores, figures: &DaemonFigures, stop: &AtomicBool) {
        let cache = Cache::default();
        let ctx = Ctx::new(root, stores, stores.me().clone());
        while !stop.load(Ordering::Relaxed) {
            if !self.readable() {
                continue;
            }
            match self.socket.accept() {
                Ok((stream, _)) => {
                    if let Err(e) = self.answer(stream, &ctx, &cache, figures) {
                        tracing::debug!("/metrics: {e}");
                    }
                }
                Err(e) => tracing::warn!("/metrics: cannot accept a connection: {e}"),
            }
        }
    }

    /// Whether a connection waits, within [`STOP_POLL`].
    #[cfg(windows)]
    fn readable(&self) -> bool {
        use std::os::windows::io::AsRawSocket;
        use windows_sys::Win32::Networking::WinSock::{POLLRDNORM, WSAPOLLFD, WSAPoll};
        let mut fd = WSAPOLLFD {
            fd: self.socket.as_raw_socket() as usize,
            events: POLLRDNORM,
            revents: 0,
        };
        // SAFETY: one WSAPOLLFD of a socket we own, for the call.
        unsafe { WSAPoll(&raw mut fd, 1, STOP_POLL.as_millis() as i32) > 0 }
    }

    /// Whether a connection waits, within [`STOP_POLL`].
    #[cfg(unix)]
    fn readable(&self) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        let mut fds = [PollFd::new(self.socket.as_fd(), PollFlags::POLLIN)];
        let timeout = PollTimeout::try_from(STOP_POLL.as_millis() as i32).unwrap_or(PollTimeout::NONE);
        matches!(poll(&mut fds, timeout), Ok(n) if n > 0)
    }

    /// Reads one request and answers it.
    fn answer(
        &self,
        mut stream: TcpStream,
        ctx: &Ctx,
        cache: &Cache,
        figures: &DaemonFigures,
    ) -> std::io::Result<()> {
        stream.set_read_timeout(Some(READ_TIMEOUT))?;
        stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let Some(head) = read_head(&mut stream)? else {
            return respond(
                &mut stream,
                "400 Bad Request",
                "text/plain",
                b"bad request\n",
                false,
            );
        };
        let request = Request::parse(&head);
        let head_only = request.method == "HEAD";
        if !matches!(request.method.as_str(), "GET" | "HEAD") {
            return respond(
                &mut stream,
                "405 Method Not Allowed",
                "text/plain",
                b"GET /metrics\n",
                false,
            );
        }
        if request.path != "/metrics" {
            return respond(
                &mut stream,
                "404 Not Found",
                "text/plain",
                b"not found: GET /metrics\n",
                head_only,
            );
        }
        if !self.access.anonymous
            && !self.open_on_loopback()
            && !self.access.token_matches(request.authorization.as_deref())
        {
            return respond(
                &mut stream,
                "401 Unauthorized",
                "text/plain",
                b"send `Authorization: Bearer TOKEN` with the scrape token\n",
                head_only,
            );
        }
        let format = Format::from_accept(request.accept.as_deref());
        match super::render(ctx, cache, Some(figures), format) {
            Ok(body) => respond(
                &mut stream,
                "200 OK",
                format.content_type(),
                body.as_bytes(),
                head_only,
            ),
            Err(e) => {
                tracing::warn!("/metrics: {}", crate::error::with_causes(&e));
                respond(
                    &mut stream,
                    "500 Internal Server Error",
                    "text/plain",
                    b"cannot read the loops\n",
                    head_only,
                )
            }
        }
    }

    /// Without a scrape token, on a loopback address, anyone on the host
    /// may scrape (as they may read the root).
    fn open_on_loopback(&self) -> bool {
        self.access.token_sha256.is_none() && self.local_addr().is_some_and(|a| a.ip().is_loopback())
    }
}

/// A request's line and the headers `/metrics` looks at.
struct Request {
    method: String,
    path: String,
    accept: Option<String>,
    authorization: Option<String>,
}

impl Request {
    fn parse(head: &str) -> Request {
        let mut lines = head.split("\r\n");
        let mut first = lines.next().unwrap_or("").split(' ');
        let method = first.next().unwrap_or("").to_owned();
        let target = first.next().unwrap_or("");
        let path = target.split('?').next().unwrap_or("").to_owned();
        let mut r = Request {
            method,
            path,
            accept: None,
            authorization: None,
        };
        for line in lines {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = Some(value.trim().to_owned());
            match name.trim().to_ascii_lowercase().as_str() {
                "accept" => r.accept = value,
                "authorization" => r.authorization = value,
                _ => {}
            }
        }
        r
    }
}

/// The request's head, up to its blank line: none when it is longer than
/// [`MAX_HEAD`], not text, or the client stopped before its end.
fn read_head(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while head.len() < MAX_HEAD {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end);
            return Ok(String::from_utf8(head).ok());
        }
    }
    Ok(None)
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    if !head_only {
        stream.write_all(body)?;
    }
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_head_gives_its_path_and_headers() {
        let r = Request::parse(
            "GET /metrics?x=1 HTTP/1.1\r\nHost: h\r\nAccept: application/openmetrics-text\r\nauthorization: Bearer t",
        );
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/metrics"));
        assert_eq!(r.accept.as_deref(), Some("application/openmetrics-text"));
        assert_eq!(r.authorization.as_deref(), Some("Bearer t"));
    }

    #[test]
    fn an_address_others_reach_needs_a_token_or_anonymous() {
        let e = Listener::bind("0.0.0.0:0", &ScrapeAccess::default())
            .err()
            .expect("refused");
        assert!(e.to_string().contains("token_sha256"), "{e}");
        assert!(Listener::bind("127.0.0.1:0", &ScrapeAccess::default()).is_ok());
        let anyone = ScrapeAccess {
            token_sha256: None,
            anonymous: true,
        };
        assert!(Listener::bind("0.0.0.0:0", &anyone).is_ok());
    }
}
