//! The sandbox one evaluation runs in: the store's data (WASI linked with
//! nothing granted, captured and bounded stdout/stderr, the host `log`
//! import), and the memory budget; the mapping of a context onto each
//! version's WIT types is in `world`. A store lives for exactly one call
//! and is then dropped (a long-lived host may make it ahead of the call;
//! see `spare`).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use jiff::Timestamp;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// How much a gate may print (stdout, stderr and `log` each) per evaluation
/// before the rest is dropped and a truncation marker is added.
pub const OUTPUT_LIMIT: usize = 64 * 1024;

/// Severity of a gate's log line; mirrors `level` in the WIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// Where a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogSource {
    /// The `log` import.
    Host,
    /// The gate's stdout (each line at `info`).
    Stdout,
    /// The gate's stderr (each line at `warn`).
    Stderr,
}

/// One line a gate logged or printed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GateLog {
    pub level: LogLevel,
    pub source: LogSource,
    pub message: String,
}

/// A bounded in-memory sink for a gate's stdout or stderr. Writes never fail
/// (a gate that checks its writes must not be pushed into a trap by a full
/// buffer); bytes past the limit are counted and dropped.
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<CapturedBuf>>);

#[derive(Default)]
struct CapturedBuf {
    bytes: Vec<u8>,
    dropped: u64,
}

impl Captured {
    fn push(&self, data: &[u8]) {
        let mut buf = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let room = OUTPUT_LIMIT.saturating_sub(buf.bytes.len());
        let take = room.min(data.len());
        buf.bytes.extend_from_slice(&data[..take]);
        buf.dropped += (data.len() - take) as u64;
    }

    /// The text captured so far, lossily decoded, with a truncation marker.
    pub(crate) fn text(&self) -> String {
        let buf = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut text = String::from_utf8_lossy(&buf.bytes).into_owned();
        if buf.dropped > 0 {
            if !text.ends_with('\n') && !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&truncation_marker(buf.dropped));
        }
        text
    }
}

fn truncation_marker(dropped: u64) -> String {
    format!(
        "[output truncated: {dropped} more bytes past the {} KiB limit]",
        OUTPUT_LIMIT / 1024
    )
}

impl IsTerminal for Captured {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Captured {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for Captured {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }
    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }
    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(OUTPUT_LIMIT)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Captured {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for Captured {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The wall clock a gate sees: frozen at the context's `now` (milliseconds
/// since the epoch), so a gate decides on what it was given and a replay
/// sees the same time. Shared with the store's data, which sets it when an
/// instance made ahead is given its call.
#[derive(Clone)]
struct FrozenClock(Arc<AtomicU64>);

impl HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }
    fn now(&self) -> Duration {
        Duration::from_millis(self.0.load(Ordering::Relaxed))
    }
}

/// Counts linear memory (and table slots) over every memory of an instance
/// against one cap; growing past it is an error the host recognises.
pub(crate) struct MemoryBudget {
    limit: u64,
    used: u64,
    /// Set when the cap refused a growth, so the host classifies the trap
    /// that follows without reading its message.
    pub(crate) hit: bool,
}

/// The error a growth past the memory cap raises inside the guest.
#[derive(Debug)]
pub(crate) struct MemoryCapHit;

impl std::fmt::Display for MemoryCapHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("memory cap reached")
    }
}

impl std::error::Error for MemoryCapHit {}

impl MemoryBudget {
    fn grow(&mut self, bytes: u64) -> wasmtime::Result<bool> {
        if self.used.saturating_add(bytes) > self.limit {
            self.hit = true;
            return Err(wasmtime::Error::new(MemoryCapHit));
        }
        self.used += bytes;
        Ok(true)
    }
}

impl wasmtime::ResourceLimiter for MemoryBudget {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|m| desired > m) {
            return Ok(false);
        }
        self.grow(desired.saturating_sub(current) as u64)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|m| desired > m) {
            return Ok(false);
        }
        let slot = std::mem::size_of::<usize>() as u64;
        self.grow(desired.saturating_sub(current) as u64 * slot)
    }
}

/// The data of one evaluation's store.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    clock: FrozenClock,
    pub(crate) budget: MemoryBudget,
    pub(crate) stdout: Captured,
    pub(crate) stderr: Captured,
    logs: Vec<GateLog>,
    log_bytes: usize,
    log_dropped: u64,
    /// When the call running in this store must be done: past it, the
    /// next epoch check traps.
    pub(crate) deadline: Instant,
}

impl HostState {
    /// A sandbox that grants nothing: no preopened directories, no
    /// environment, no arguments, no network, a closed stdin, captured
    /// stdout/stderr and a wall clock frozen at `now`.
    pub(crate) fn new(memory_limit: u64, now: Timestamp) -> HostState {
        let stdout = Captured::default();
        let stderr = Captured::default();
        let clock = FrozenClock(Arc::new(AtomicU64::new(millis(now))));
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .wall_clock(clock.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        HostState {
            wasi,
            table: ResourceTable::new(),
            clock,
            budget: MemoryBudget {
                limit: memory_limit,
                used: 0,
                hit: false,
            },
            stdout,
            stderr,
            logs: Vec::new(),
            log_bytes: 0,
            log_dropped: 0,
            // Set with the store's epoch deadline, before anything runs.
            deadline: Instant::now(),
        }
    }

    /// Sets the time the gate's wall clock shows: the context's `now`, given
    /// to an instance made before its call was known.
    pub(crate) fn set_now(&mut self, now: Timestamp) {
        self.clock.0.store(millis(now), Ordering::Relaxed);
    }

    /// Everything the gate said: its `log` lines, then its stdout and stderr
    /// split into lines.
    pub(crate) fn take_logs(&mut self) -> Vec<GateLog> {
        let mut logs = std::mem::take(&mut self.logs);
        if self.log_dropped > 0 {
            logs.push(GateLog {
                level: LogLevel::Warn,
                source: LogSource::Host,
                message: format!("[{} more log lines dropped]", self.log_dropped),
            });
        }
        for (captured, level, source) in [
            (&self.stdout, LogLevel::Info, LogSource::Stdout),
            (&self.stderr, LogLevel::Warn, LogSource::Stderr),
        ] {
            logs.extend(captured.text().lines().map(|line| GateLog {
                level,
                source,
                message: line.to_owned(),
            }));
        }
        logs
    }

    /// The gate's stdout and stderr as one text, for a trap's error.
    pub(crate) fn guest_output(&self) -> String {
        let mut out = self.stdout.text();
        let err = self.stderr.text();
        if !out.is_empty() && !err.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&err);
        out.trim_end().to_owned()
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Milliseconds since the Unix epoch (none before it).
pub(crate) fn millis(t: Timestamp) -> u64 {
    t.as_millisecond().max(0) as u64
}

impl HostState {
    /// A line the gate wrote through the host's `log` (any version's),
    /// dropped once the gate has logged its limit.
    pub(crate) fn log_line(&mut self, level: LogLevel, message: String) {
        if self.log_bytes + message.len() > OUTPUT_LIMIT {
            self.log_dropped += 1;
            return;
        }
        self.log_bytes += message.len();
        self.logs.push(GateLog {
            level,
            source: LogSource::Host,
            message,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_is_bounded_and_marks_truncation() {
        let c = Captured::default();
        let line = [b'x'; 1000];
        for _ in 0..200 {
            c.push(&line);
        }
        let text = c.text();
        assert!(text.len() < OUTPUT_LIMIT + 200, "{}", text.len());
        let marker = format!("{} more bytes", 200_000 - OUTPUT_LIMIT);
        assert!(text.ends_with(&format!("[output truncated: {marker} past the 64 KiB limit]")));
    }

    #[test]
    fn budget_counts_every_memory_against_one_cap() {
        let mut b = MemoryBudget {
            limit: 10 * 65536,
            used: 0,
            hit: false,
        };
        assert!(b.grow(6 * 65536).unwrap());
        assert!(b.grow(4 * 65536).unwrap());
        let err = b.grow(65536).unwrap_err();
        assert!(err.downcast_ref::<MemoryCapHit>().is_some());
        assert!(b.hit);
    }
}
