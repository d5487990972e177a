//! windowed: business hours in a time zone, a cap on spending over the last
//! 24 hours, and a halt after failures in a row (automaton:gate@0.3.0).
//!
//! - After `max_failures` failed runs in a row (3): halt.
//! - Before the step, outside Monday to Friday `start_hour`–`end_hour`
//!   (09–17) in `timezone`: skip. The local time comes from the host's
//!   zone database (`in-zone`), so daylight saving time is the host's.
//! - When `metric` (`cost_usd`) summed over the last 24 hours exceeds
//!   `cap`: await approval. The host computes the sum from the loop's
//!   history (the gate asks for the window in `describe`), so the window
//!   slides while the loop waits.
//! - Otherwise: proceed.
//!
//! Params: `{"timezone": "Europe/Paris", "cap": 5}`; optional `metric`,
//! `start_hour`, `end_hour`, `max_failures`.

use serde::Deserialize;

wit_bindgen::generate!({
    world: "gate",
    path: "wit",
});

use automaton::gate::host::{in_zone, log};
use automaton::gate::types::{HistoryRequest, Level, Phase};

const DAY_MS: u64 = 86_400_000;
const WEEKDAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    timezone: String,
    cap: f64,
    #[serde(default = "cost_usd")]
    metric: String,
    #[serde(default = "nine")]
    start_hour: u8,
    #[serde(default = "seventeen")]
    end_hour: u8,
    #[serde(default = "three")]
    max_failures: u32,
}

fn cost_usd() -> String {
    String::from("cost_usd")
}
fn nine() -> u8 {
    9
}
fn seventeen() -> u8 {
    17
}
fn three() -> u32 {
    3
}

fn params(text: &str) -> Result<Params, String> {
    let p: Params = serde_json::from_str(text).map_err(|e| format!("invalid params: {e}"))?;
    if p.start_hour >= p.end_hour || p.end_hour > 24 {
        return Err(format!(
            "start_hour: must be before end_hour, both from 0 to 24 ({} to {})",
            p.start_hour, p.end_hour
        ));
    }
    if p.cap.is_nan() || p.cap < 0.0 {
        return Err(format!("cap: must be a number of at least 0, got {}", p.cap));
    }
    if p.max_failures == 0 {
        return Err(String::from("max_failures: must be at least 1"));
    }
    Ok(p)
}

struct Windowed;

impl Guest for Windowed {
    fn describe() -> GateInfo {
        GateInfo {
            name: String::from("windowed"),
            version: String::from(env!("CARGO_PKG_VERSION")),
            description: String::from(
                "Runs Mon-Fri 09-17 in a time zone, awaits approval when a metric's sum over the last 24 h exceeds a cap, halts after 3 failures in a row.",
            ),
            params_schema: String::from(
                r#"{"type": "object", "additionalProperties": false, "required": ["timezone", "cap"], "properties": {"timezone": {"type": "string", "minLength": 1}, "cap": {"type": "number", "minimum": 0}, "metric": {"type": "string", "minLength": 1}, "start_hour": {"type": "integer", "minimum": 0, "maximum": 23}, "end_hour": {"type": "integer", "minimum": 1, "maximum": 24}, "max_failures": {"type": "integer", "minimum": 1}}}"#,
            ),
            // The sums over the last 24 hours, in every context.
            history: HistoryRequest {
                runs: 0,
                windows_ms: vec![DAY_MS],
            },
        }
    }

    fn check_params(text: String) -> Result<(), String> {
        params(&text).map(|_| ())
    }

    fn evaluate(ctx: Context) -> Result<Decision, String> {
        let p = params(&ctx.params)?;
        if ctx.consecutive_failures >= p.max_failures {
            return Ok(Decision::Halt(format!(
                "{} failed runs in a row (at most {})",
                ctx.consecutive_failures, p.max_failures
            )));
        }
        if ctx.phase == Phase::AfterStep {
            return Ok(Decision::Proceed);
        }
        let at = i64::try_from(ctx.now_ms).map_err(|_| String::from("now-ms out of range"))?;
        let local = in_zone(at, &p.timezone).map_err(|e| format!("timezone: {e}"))?;
        let open = local.weekday <= 5 && (p.start_hour..p.end_hour).contains(&local.hour);
        if !open {
            return Ok(Decision::Skip(format!(
                "outside Mon-Fri {:02}:00-{:02}:00 {}: it is {} {:02}:{:02}",
                p.start_hour,
                p.end_hour,
                p.timezone,
                WEEKDAYS[usize::from(local.weekday.clamp(1, 7) - 1)],
                local.hour,
                local.minute
            )));
        }
        let day = ctx.history.windows.iter().find(|w| w.window_ms == DAY_MS);
        let spent = match day {
            Some(w) => {
                let sums: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(&w.sums).map_err(|e| format!("window sums: {e}"))?;
                sums.get(&p.metric)
                    .and_then(serde_json::Value::as_f64)
                    .unwrap_or(0.0)
            }
            None => 0.0,
        };
        log(
            Level::Info,
            &format!("{} over the last 24 h: {spent} of {}", p.metric, p.cap),
        );
        if spent > p.cap {
            return Ok(Decision::AwaitApproval(format!(
                "{} over the last 24 h is {spent}, over the cap of {}",
                p.metric, p.cap
            )));
        }
        Ok(Decision::Proceed)
    }
}

export!(Windowed);
