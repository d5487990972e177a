//! A blocking connection to the PostgreSQL server whose every call keeps a
//! bound, whatever the server does. The async driver (`tokio-postgres`)
//! runs on a runtime of the connection's own, one thread, driven only
//! while a call waits: each call polls the connection and the request
//! together until the answer comes or the bound passes. A call past its
//! bound abandons the connection (it is never used again, and closing it
//! waits on nothing), so a frozen server, a network that drops every
//! packet, or a listener that never answers costs a caller its bound, not
//! its life. Notifications (`LISTEN`) that arrive while the connection is
//! driven are kept until asked for.
//!
//! Each statement is prepared once a connection and kept (up to
//! [`KEPT_STATEMENTS`]), so a statement run again costs one round trip and
//! no parsing: what a daemon, running the same few statements for every
//! tick, pays most. The API mirrors the blocking `postgres` crate's, so
//! the store's SQL reads as it did: `query`, `query_one`, `query_opt`, `execute`,
//! `batch_execute`, `transaction` (and on a transaction the same, and
//! `commit`). Whether a write whose answer never came may have been made
//! is [`PgError::outcome_unknown`]: a caller that must know reads the
//! state again, it never repeats the write blindly.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_postgres::error::{Severity, SqlState};
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Config, NoTls, Notification, Row, Socket, Statement};

/// How long closing a connection may take: its goodbye is written, and
/// the socket shut; nothing is waited for from the server.
const CLOSE_WITHIN: Duration = Duration::from_secs(1);

/// How many prepared statements a connection keeps: more than the store
/// has, so the bound holds only against SQL built at run time.
const KEPT_STATEMENTS: usize = 128;

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Why a call on a connection failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum PgError {
    /// The server answered with an error, or the connection failed.
    #[error(transparent)]
    Server(#[from] tokio_postgres::Error),
    /// No answer within the call's bound: the connection was abandoned.
    #[error("the server did not answer within {}", crate::duration::format(*.0))]
    NoAnswer(Duration),
    /// The connection had been abandoned: nothing was sent.
    #[error("the connection was given up after the server did not answer")]
    Abandoned,
    /// The server closed the connection before it answered.
    #[error("the server closed the connection")]
    Ended,
}

impl PgError {
    /// Whether a write that failed so may have been made all the same: it
    /// was sent and its answer was lost (no answer in time, the connection
    /// cut or ended by the server). An error the server answered with on
    /// a live session means the write's transaction was rolled back.
    pub(super) fn outcome_unknown(&self) -> bool {
        match self {
            PgError::NoAnswer(_) | PgError::Ended => true,
            PgError::Abandoned => false,
            PgError::Server(e) => match e.as_db_error() {
                // A session ended by the server (terminated, shut down) may
                // have committed before it said so.
                Some(db) => matches!(db.parsed_severity(), Some(Severity::Fatal | Severity::Panic)),
                None => {
                    e.is_closed()
                        || std::error::Error::source(e)
                            .is_some_and(<dyn std::error::Error + 'static>::is::<std::io::Error>)
                }
            },
        }
    }

    /// Whether the call went unanswered within its bound.
    pub(super) fn timed_out(&self) -> bool {
        matches!(self, PgError::NoAnswer(_) | PgError::Abandoned)
    }

    /// Whether the server gave up waiting for a table or row lock
    /// (`lock_timeout`).
    pub(super) fn is_lock_wait(&self) -> bool {
        match self {
            PgError::Server(e) => e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE),
            _ => false,
        }
    }
}

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub(super) enum ConnectError {
    #[error(transparent)]
    Server(tokio_postgres::Error),
    #[error("the server did not answer within {}", crate::duration::format(*.0))]
    NoAnswer(Duration),
    #[error("cannot start the connection's runtime")]
    Runtime(#[source] std::io::Error),
    /// Connected, but the session's settings could not be set.
    #[error("cannot set the session's settings")]
    Setup(#[source] PgError),
    /// The session given is another connection's too.
    #[error(transparent)]
    Shared(super::conn::SharedSession),
}

/// What drives a connection: its runtime, and the connection's link.
struct Io {
    runtime: tokio::runtime::Runtime,
    link: Link,
    /// A call went unanswered: the connection is not used again.
    abandoned: bool,
    /// How long one call may wait for its answer.
    bound: Duration,
    /// The statements prepared on this connection, by their text.
    prepared: HashMap<String, Statement>,
}

/// The connection itself, and what it delivered that no call asked for yet.
struct Link {
    connection: tokio_postgres::Connection<Socket, NoTlsStream>,
    notifications: VecDeque<Notification>,
    /// The connection ended (closed by the server, or failed).
    ended: bool,
}

/// One connection, every call bounded.
pub(super) struct Client {
    io: Io,
    /// Dropped first when the connection is closed, so the driver says
    /// goodbye to the server.
    client: Option<tokio_postgres::Client>,
}

/// A transaction on a [`Client`]; rolled back when dropped uncommitted
/// (the rollback is sent ahead of the connection's next call).
pub(super) struct Transaction<'a> {
    io: &'a mut Io,
    tx: tokio_postgres::Transaction<'a>,
}

impl Link {
    /// Polls the connection, keeping what it delivers, until it would
    /// wait; returns the error it ended with, if it failed.
    fn poll(&mut self, cx: &mut Context<'_>) -> Option<tokio_postgres::Error> {
        while !self.ended {
            match self.connection.poll_message(cx) {
                Poll::Ready(Some(Ok(AsyncMessage::Notification(n)))) => self.notifications.push_back(n),
                Poll::Ready(Some(Ok(AsyncMessage::Notice(n)))) => {
                    tracing::debug!("PostgreSQL: {}: {}", n.severity(), n.message());
                }
                Poll::Ready(Some(Ok(_))) => {}
                Poll::Ready(Some(Err(e))) => {
                    self.ended = true;
                    return Some(e);
                }
                Poll::Ready(None) => self.ended = true,
                Poll::Pending => break,
            }
        }
        None
    }
}

impl Io {
    /// Drives the connection and `f` until `f` is ready, or `wait`
    /// passes (`None`).
    fn drive<T>(
        &mut self,
        wait: Duration,
        mut f: impl FnMut(&mut Context<'_>, &mut VecDeque<Notification>) -> Poll<Result<T, PgError>>,
    ) -> Option<Result<T, PgError>> {
        let Io { runtime, link, .. } = self;
        let polled = std::future::poll_fn(|cx| {
            let failed = link.poll(cx);
            match f(cx, &mut link.notifications) {
                Poll::Ready(r) => Poll::Ready(r),
                Poll::Pending => match failed {
                    Some(e) => Poll::Ready(Err(PgError::Server(e))),
                    None if link.ended => Poll::Ready(Err(PgError::Ended)),
                    None => Poll::Pending,
                },
            }
        });
        runtime.block_on(async { tokio::time::timeout(wait, polled).await.ok() })
    }

    /// Runs one request within the bound; past it, the connection is
    /// abandoned.
    fn run<T>(
        &mut self,
        request: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, PgError> {
        if self.abandoned {
            return Err(PgError::Abandoned);
        }
        let bound = self.bound;
        let mut request = pin!(request);
        if let Some(answer) = self.drive(bound, |cx, _| request.as_mut().poll(cx).map_err(PgError::Server)) {
            answer
        } else {
            self.abandoned = true;
            Err(PgError::NoAnswer(bound))
        }
    }
}

impl Io {
    /// The statement `sql`, prepared on this connection (by `prepare`, on
    /// the client or a transaction) the first time it is asked for.
    fn statement<F>(&mut self, sql: &str, prepare: impl FnOnce() -> F) -> Result<Statement, PgError>
    where
        F: Future<Output = Result<Statement, tokio_postgres::Error>>,
    {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let s = self.run(prepare())?;
        if self.prepared.len() < KEPT_STATEMENTS {
            self.prepared.insert(sql.to_owned(), s.clone());
        }
        Ok(s)
    }

    /// Runs a request made of a kept statement. A statement the server
    /// refused is prepared again next time: one that a change of schema
    /// made stale (its result's type changed) heals so.
    fn run_kept<T>(
        &mut self,
        sql: &str,
        request: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, PgError> {
        let result = self.run(request);
        if matches!(result, Err(PgError::Server(_))) {
            self.prepared.remove(sql);
        }
        result
    }
}

impl Client {
    /// Connects within `within` (the whole of it: the socket, the start-up,
    /// authentication), whatever the other end does; each call on the
    /// connection then waits at most `bound`.
    pub(super) fn connect(
        config: &Config,
        within: Duration,
        bound: Duration,
    ) -> Result<Client, ConnectError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(ConnectError::Runtime)?;
        let connected = runtime.block_on(async { tokio::time::timeout(within, config.connect(NoTls)).await });
        let (client, connection) = match connected {
            Ok(Ok(made)) => made,
            Ok(Err(e)) => return Err(ConnectError::Server(e)),
            Err(_) => return Err(ConnectError::NoAnswer(within)),
        };
        Ok(Client {
            io: Io {
                runtime,
                link: Link {
                    connection,
                    notifications: VecDeque::new(),
                    ended: false,
                },
                abandoned: false,
                bound,
                prepared: HashMap::new(),
            },
            client: Some(client),
        })
    }

    /// Runs `sql`, one statement, in the simple protocol (nothing
    /// prepared); its first row's first column.
    pub(super) fn set_up(&mut self, sql: &str) -> Result<(String, String), PgError> {
        use tokio_postgres::SimpleQueryMessage;
        let client = self.client.as_ref().expect("a client until dropped");
        let answer = self.io.run(client.simple_query(sql))?;
        let column = |i: usize| {
            answer
                .iter()
                .find_map(|m| match m {
                    SimpleQueryMessage::Row(row) => row.get(i),
                    _ => None,
                })
                .unwrap_or_default()
                .to_owned()
        };
        Ok((column(0), column(1)))
    }

    fn inner(&self) -> &tokio_postgres::Client {
        self.client.as_ref().expect("a client until dropped")
    }

    pub(super) fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, PgError> {
        let client = self.client.as_ref().expect("a client until dropped");
        let s = self.io.statement(sql, || client.prepare(sql))?;
        self.io.run_kept(sql, client.query(&s, params))
    }

    pub(super) fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, PgError> {
        let client = self.client.as_ref().expect("a client until dropped");
        let s = self.io.statement(sql, || client.prepare(sql))?;
        self.io.run_kept(sql, client.query_one(&s, params))
    }

    pub(super) fn query_opt(&mut self, sql: &str, params: Params<'_>) -> Result<Option<Row>, PgError> {
        let client = self.client.as_ref().expect("a client until dropped");
        let s = self.io.statement(sql, || client.prepare(sql))?;
        self.io.run_kept(sql, client.query_opt(&s, params))
    }

    pub(super) fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, PgError> {
        let client = self.client.as_ref().expect("a client until dropped");
        let s = self.io.statement(sql, || client.prepare(sql))?;
        self.io.run_kept(sql, client.execute(&s, params))
    }

    pub(super) fn batch_execute(&mut self, sql: &str) -> Result<(), PgError> {
        let client = self.client.as_ref().expect("a client until dropped");
        self.io.run(client.batch_execute(sql))
    }

    /// Begins a transaction.
    pub(super) fn transaction(&mut self) -> Result<Transaction<'_>, PgError> {
        let Client { io, client } = self;
        let client = client.as_mut().expect("a client until dropped");
        let tx = io.run(client.transaction())?;
        Ok(Transaction { io, tx })
    }

    /// Whether the connection is of no more use: closed, failed, or
    /// abandoned after a call went unanswered.
    pub(super) fn is_closed(&self) -> bool {
        self.io.link.ended || self.io.abandoned || self.inner().is_closed()
    }

    /// Whether a call went unanswered within its bound: the server may not
    /// answer a new connection either.
    pub(super) fn is_abandoned(&self) -> bool {
        self.io.abandoned
    }

    /// The notifications that arrived, waiting up to `wait` for the first
    /// (none when none came); an error when the connection ended.
    pub(super) fn notifications(&mut self, wait: Duration) -> Result<Vec<Notification>, PgError> {
        if self.io.link.notifications.is_empty() {
            let arrived = self.io.drive(wait, |_, notes| {
                if notes.is_empty() {
                    Poll::Pending
                } else {
                    Poll::Ready(Ok(()))
                }
            });
            if let Some(Err(e)) = arrived {
                return Err(e);
            }
        }
        Ok(self.io.link.notifications.drain(..).collect())
    }
}

impl Drop for Client {
    /// Says goodbye to the server, unless the connection was abandoned:
    /// the goodbye is written and the socket shut, waiting on nothing the
    /// server does, and never longer than [`CLOSE_WITHIN`].
    fn drop(&mut self) {
        drop(self.client.take());
        if self.io.abandoned || self.io.link.ended {
            return;
        }
        let _ = self
            .io
            .drive(CLOSE_WITHIN, |_, _| Poll::<Result<(), PgError>>::Pending);
    }
}

impl Transaction<'_> {
    pub(super) fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, PgError> {
        let s = self.io.statement(sql, || self.tx.prepare(sql))?;
        self.io.run_kept(sql, self.tx.query_one(&s, params))
    }

    pub(super) fn query_opt(&mut self, sql: &str, params: Params<'_>) -> Result<Option<Row>, PgError> {
        let s = self.io.statement(sql, || self.tx.prepare(sql))?;
        self.io.run_kept(sql, self.tx.query_opt(&s, params))
    }

    pub(super) fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, PgError> {
        let s = self.io.statement(sql, || self.tx.prepare(sql))?;
        self.io.run_kept(sql, self.tx.execute(&s, params))
    }

    pub(super) fn batch_execute(&mut self, sql: &str) -> Result<(), PgError> {
        self.io.run(self.tx.batch_execute(sql))
    }

    /// Commits. An error whose [`PgError::outcome_unknown`] holds leaves
    /// whether it committed unknown.
    pub(super) fn commit(self) -> Result<(), PgError> {
        let Transaction { io, tx } = self;
        io.run(tx.commit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_sent_and_unanswered_may_have_been_made_and_one_never_sent_was_not() {
        let unanswered = PgError::NoAnswer(Duration::from_secs(2));
        assert!(unanswered.outcome_unknown() && unanswered.timed_out());
        assert!(PgError::Ended.outcome_unknown() && !PgError::Ended.timed_out());
        assert!(!PgError::Abandoned.outcome_unknown());
        assert!(!unanswered.is_lock_wait());
        assert_eq!(unanswered.to_string(), "the server did not answer within 2s");
    }
}
