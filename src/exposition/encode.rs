//! The figures read as metric families, written by `prometheus-client`'s
//! encoders (the Prometheus text format or OpenMetrics) through a
//! collector that holds one scrape's families. A family with no series is
//! left out whole.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabel, EncodeLabelSet, LabelSetEncoder, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::Format;
use super::daemon::DaemonRead;
use super::figures::{Hist, Labels, LoopFigures, STATUSES, epoch_seconds};

/// A series' labels: the loop's (`loop` and its `[labels]`, shared by
/// all its series), then the series' own.
#[derive(Debug)]
struct Series {
    base: Arc<Labels>,
    own: Vec<(&'static str, String)>,
}

impl EncodeLabelSet for Series {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let base = self.base.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let own = self.own.iter().map(|(k, v)| (*k, v.as_str()));
        for label in base.chain(own) {
            label.encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

/// A series' value.
#[derive(Debug)]
enum Value {
    Gauge(f64),
    Counter(f64),
    Histogram(Hist),
}

/// A metric family: its name (without unit and `_total`), help, unit and
/// series.
#[derive(Debug)]
struct Family {
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    kind: MetricType,
    series: Vec<(Series, Value)>,
}

impl Family {
    fn new(name: &'static str, kind: MetricType, unit: Option<Unit>, help: &'static str) -> Family {
        Family {
            name,
            help,
            unit,
            kind,
            series: Vec::new(),
        }
    }

    fn push(&mut self, labels: Series, value: Value) {
        self.series.push((labels, value));
    }
}

/// One scrape's families, as the registry's collector.
#[derive(Debug)]
struct Scrape(Vec<Family>);

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in self.0.iter().filter(|f| !f.series.is_empty()) {
            let mut metric = encoder.encode_descriptor(f.name, f.help, f.unit.as_ref(), f.kind)?;
            for (labels, value) in &f.series {
                let mut e = metric.encode_family(labels)?;
                match value {
                    Value::Gauge(v) => match whole(*v) {
                        Some(n) => e.encode_gauge(&n)?,
                        None => e.encode_gauge(v)?,
                    },
                    Value::Counter(v) => match whole(*v).and_then(|n| u64::try_from(n).ok()) {
                        Some(n) => e.encode_counter::<NoLabelSet, u64, f64>(&n, None)?,
                        None => e.encode_counter::<NoLabelSet, f64, f64>(v, None)?,
                    },
                    Value::Histogram(h) => {
                        e.encode_histogram::<NoLabelSet>(h.sum, h.count, &h.buckets(), None)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// `v` as an integer when it is one (a count, a whole second), so it is
/// written `3`, not `3.0`.
fn whole(v: f64) -> Option<i64> {
    (v.fract() == 0.0 && v.abs() < 9.0e15).then_some(v as i64)
}

/// The exposition of `loops` and a daemon's figures in `format`.
pub(super) fn encode(loops: Vec<LoopFigures>, daemon: Option<DaemonRead>, format: Format) -> String {
    let mut families = loop_families(&loops);
    if let Some(d) = daemon {
        families.extend(daemon_families(d));
    }
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape(families)));
    let mut out = String::new();
    let written = match format {
        Format::Prometheus => prometheus_client::encoding::prometheus_text::encode(&mut out, &registry),
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
    };
    written.expect("writing to a String does not fail");
    out
}

/// No labels (a daemon's series).
fn none() -> Series {
    just(&Arc::default())
}

/// The loop's labels alone.
fn just(base: &Arc<Labels>) -> Series {
    Series {
        base: Arc::clone(base),
        own: Vec::new(),
    }
}

/// The loop's labels and the series' own.
fn with<const N: usize>(base: &Arc<Labels>, own: [(&'static str, &str); N]) -> Series {
    Series {
        base: Arc::clone(base),
        own: own.into_iter().map(|(k, v)| (k, v.to_owned())).collect(),
    }
}

fn loop_families(loops: &[LoopFigures]) -> Vec<Family> {
    use MetricType::{Counter, Gauge, Histogram};
    let s = || Some(Unit::Seconds);
    let mut status = Family::new(
        "automaton_loop_status",
        Gauge,
        None,
        "1 for the loop's status (as list shows it: active, paused, awaiting_approval, halted, completed, invalid, unreadable), 0 for the others.",
    );
    let mut next = Family::new(
        "automaton_loop_next_firing_timestamp",
        Gauge,
        s(),
        "When the loop's schedule fires it next (an active loop with a schedule only).",
    );
    let mut last = Family::new(
        "automaton_loop_last_firing_timestamp",
        Gauge,
        s(),
        "When the loop last fired: its last tick's start, or the last firing in its ledger that was not missed.",
    );
    let mut success = Family::new(
        "automaton_loop_last_success_timestamp",
        Gauge,
        s(),
        "When a tick of the loop last ended with its step run successfully.",
    );
    let mut interval = Family::new(
        "automaton_loop_expected_interval",
        Gauge,
        s(),
        "The time between two firings its schedule calls for now (for cron, from the last firing to the next).",
    );
    let mut lateness = Family::new(
        "automaton_loop_firing_lateness",
        Histogram,
        s(),
        "How long after it fell due (jitter included) the daemon started each firing that ran, from the ledger.",
    );
    let mut firings = Family::new(
        "automaton_loop_firings",
        Counter,
        None,
        "Firings in the loop's ledger, by kind (ran, skipped, missed) and why.",
    );
    let mut ticks = Family::new(
        "automaton_loop_ticks",
        Counter,
        None,
        "Ticks recorded in the loop's history, by outcome.",
    );
    let mut failures = Family::new(
        "automaton_loop_consecutive_failures",
        Gauge,
        None,
        "Ticks in a row whose step failed (once the loop has ticked).",
    );
    let mut decisions = Family::new(
        "automaton_loop_gate_decisions",
        Counter,
        None,
        "Gate evaluations in the loop's history, by gate and decision.",
    );
    let mut gate_time = Family::new(
        "automaton_loop_gate_evaluation",
        Histogram,
        s(),
        "How long each gate evaluation took, by gate.",
    );
    let mut gate_errors = Family::new(
        "automaton_loop_gate_errors",
        Counter,
        None,
        "Gate evaluations that failed (could not load, trapped, timed out), by gate.",
    );
    let mut awaits = Family::new(
        "automaton_loop_awaits_open",
        Gauge,
        None,
        "Awaits of an approval open now (0 or 1).",
    );
    let mut await_since = Family::new(
        "automaton_loop_await_started_timestamp",
        Gauge,
        s(),
        "When the open await started (only while one is open).",
    );
    let mut await_age = Family::new(
        "automaton_loop_await_age",
        Gauge,
        s(),
        "How long the open await has waited, at the scrape (only while one is open).",
    );
    let mut approval = Family::new(
        "automaton_loop_await_to_approval",
        Histogram,
        s(),
        "From an await's start to each approval given for it, from the history.",
    );
    let mut totals = Family::new(
        "automaton_loop_step_metric",
        Counter,
        None,
        "The running totals of what the step reported (cost, tokens...), by metric, since the last budget reset.",
    );
    let now = crate::clock::now();
    for f in loops {
        let l = &Arc::new(f.labels.clone());
        for st in STATUSES {
            status.push(
                with(l, [("status", st)]),
                Value::Gauge(f64::from(u8::from(f.status == *st))),
            );
        }
        let stamp = |fam: &mut Family, t: Option<jiff::Timestamp>| {
            if let Some(t) = t {
                fam.push(just(l), Value::Gauge(epoch_seconds(t)));
            }
        };
        stamp(&mut next, f.next_firing);
        stamp(&mut last, f.last_firing);
        stamp(&mut success, f.last_success);
        stamp(&mut await_since, f.awaiting_since);
        if let Some(since) = f.awaiting_since {
            await_age.push(just(l), Value::Gauge(super::figures::seconds_between(since, now)));
        }
        if let Some(i) = f.expected_interval {
            interval.push(just(l), Value::Gauge(i));
        }
        if let Some(fires) = &f.fires {
            if fires.lateness.count > 0 {
                lateness.push(just(l), Value::Histogram(fires.lateness.clone()));
            }
            for ((kind, why), n) in &fires.firings {
                firings.push(with(l, [("kind", kind), ("why", why)]), Value::Counter(*n as f64));
            }
        }
        if let Some(n) = f.consecutive_failures {
            failures.push(just(l), Value::Gauge(f64::from(n)));
        }
        if let Some(n) = f.awaits_open {
            awaits.push(just(l), Value::Gauge(f64::from(n)));
        }
        for (metric, v) in &f.totals {
            totals.push(with(l, [("metric", metric)]), Value::Counter(*v));
        }
        let Some(h) = &f.history else { continue };
        for (outcome, n) in &h.ticks {
            ticks.push(with(l, [("outcome", outcome)]), Value::Counter(*n as f64));
        }
        for ((gate, decision), n) in &h.gate_decisions {
            decisions.push(
                with(l, [("gate", gate), ("decision", decision)]),
                Value::Counter(*n as f64),
            );
        }
        for (gate, n) in &h.gate_errors {
            gate_errors.push(with(l, [("gate", gate)]), Value::Counter(*n as f64));
        }
        for (gate, hist) in &h.gate_seconds {
            gate_time.push(with(l, [("gate", gate)]), Value::Histogram(hist.clone()));
        }
        if h.await_to_approval.count > 0 {
            approval.push(just(l), Value::Histogram(h.await_to_approval.clone()));
        }
    }
    vec![
        status,
        next,
        last,
        success,
        interval,
        lateness,
        firings,
        ticks,
        failures,
        decisions,
        gate_time,
        gate_errors,
        awaits,
        await_since,
        await_age,
        approval,
        totals,
    ]
}

fn daemon_families(d: DaemonRead) -> Vec<Family> {
    use MetricType::{Counter, Gauge, Histogram};
    let gauge = |name, help, v: u64| {
        let mut f = Family::new(name, Gauge, None, help);
        f.push(none(), Value::Gauge(v as f64));
        f
    };
    let counter = |name, help, v: u64| {
        let mut f = Family::new(name, Counter, None, help);
        f.push(none(), Value::Counter(v as f64));
        f
    };
    let mut claims = Family::new(
        "automaton_daemon_claim_duration",
        Histogram,
        Some(Unit::Seconds),
        "How long each claim of due firings took the shared store (PostgreSQL only).",
    );
    if let Some(h) = d.claims {
        claims.push(none(), Value::Histogram(h));
    }
    vec![
        gauge(
            "automaton_daemon_loops_served",
            "Loops with a schedule this daemon serves.",
            d.loops_served,
        ),
        gauge(
            "automaton_daemon_queue_depth",
            "Firings waiting in this daemon's timer queue (0 on a shared store, which keeps them).",
            d.queue_depth,
        ),
        gauge(
            "automaton_daemon_firings_overdue",
            "Firings in this daemon's queue that are due and not started.",
            d.overdue,
        ),
        gauge(
            "automaton_daemon_ticks_running",
            "Ticks this daemon runs now.",
            d.running,
        ),
        counter(
            "automaton_daemon_ticks_started",
            "Ticks this daemon started.",
            d.ticks_started,
        ),
        counter(
            "automaton_daemon_busy_skips",
            "Firings that found the loop's lock held and ran nothing.",
            d.busy_skips,
        ),
        claims,
    ]
}
