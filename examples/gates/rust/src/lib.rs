//! office-hours: runs a loop only during office hours, and asks an operator
//! before running again after a failed run.
//!
//! - Outside 09:00-17:00 UTC, or on a Saturday or Sunday: skip.
//! - When the last run failed (non-zero exit, killed, or the verifier said
//!   no): await approval. `automaton approve LOOP` lets the next tick run.
//! - Otherwise: proceed.
//!
//! Params (all optional): `{"start_hour": 9, "end_hour": 17}`.

use serde::Deserialize;

wit_bindgen::generate!({
    world: "gate",
    path: "wit",
});

use automaton::gate::host::log;
use automaton::gate::types::{HistoryRequest, Level, RunResult};

const MS_PER_HOUR: u64 = 3_600_000;
const MS_PER_DAY: u64 = 24 * MS_PER_HOUR;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    #[serde(default = "nine")]
    start_hour: u64,
    #[serde(default = "seventeen")]
    end_hour: u64,
}

fn nine() -> u64 {
    9
}

fn seventeen() -> u64 {
    17
}

/// serde's error about the params, naming the param it is about
/// (`start_hour: invalid type: string "9", expected u64`): each param is
/// read alone (the others take their defaults) until one fails.
fn params_error(params: &str, e: &serde_json::Error) -> String {
    if let Ok(fields) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(params) {
        for (name, value) in fields {
            let alone = serde_json::Value::Object([(name.clone(), value)].into_iter().collect());
            if let Err(e) = serde_json::from_value::<Params>(alone) {
                return format!("{name}: {e}");
            }
        }
    }
    format!("invalid params: {e}")
}

fn hours(params: &str) -> Result<(u64, u64), String> {
    let p: Params = serde_json::from_str(params).map_err(|e| params_error(params, &e))?;
    for (name, v) in [("start_hour", p.start_hour), ("end_hour", p.end_hour)] {
        if v > 24 {
            return Err(format!("{name} must be a whole hour from 0 to 24, not {v}"));
        }
    }
    if p.start_hour >= p.end_hour {
        return Err(format!(
            "start_hour ({}) must be before end_hour ({})",
            p.start_hour, p.end_hour
        ));
    }
    Ok((p.start_hour, p.end_hour))
}

/// How the run failed, if it did.
fn failure(run: &RunResult) -> Option<String> {
    match (run.exit_code, run.verifier_passed) {
        (None, _) => Some(String::from("was killed")),
        (Some(0), Some(false)) => Some(String::from("failed its verifier")),
        (Some(0), _) => None,
        (Some(code), _) => Some(format!("exited {code}")),
    }
}

struct OfficeHours;

impl Guest for OfficeHours {
    fn describe() -> GateInfo {
        GateInfo {
            name: String::from("office-hours"),
            version: String::from(env!("CARGO_PKG_VERSION")),
            description: String::from(
                "Runs only 09:00-17:00 UTC on weekdays, and awaits approval after a failed run.",
            ),
            params_schema: String::from(
                r#"{"type": "object", "additionalProperties": false, "properties": {"start_hour": {"type": "integer", "minimum": 0, "maximum": 23}, "end_hour": {"type": "integer", "minimum": 1, "maximum": 24}}}"#,
            ),
            // No past runs or windows of history in the context: the last
            // run (`ctx.last_run`) is all this gate reads.
            history: HistoryRequest {
                runs: 0,
                windows_ms: Vec::new(),
            },
        }
    }

    fn check_params(params: String) -> Result<(), String> {
        hours(&params).map(|_| ())
    }

    fn evaluate(ctx: Context) -> Result<Decision, String> {
        let (start, end) = hours(&ctx.params)?;
        let weekday = (ctx.now_ms / MS_PER_DAY + 3) % 7; // 1970-01-01 was a Thursday; Monday is 0
        let hour = ctx.now_ms % MS_PER_DAY / MS_PER_HOUR;
        if weekday >= 5 {
            return Ok(Decision::Skip(String::from("weekend")));
        }
        if hour < start || hour >= end {
            return Ok(Decision::Skip(format!(
                "outside office hours ({start:02}:00-{end:02}:00 UTC)"
            )));
        }
        if let Some(run) = &ctx.last_run
            && let Some(how) = failure(run)
        {
            log(Level::Info, &format!("tick {} {how}", run.tick));
            return Ok(Decision::AwaitApproval(format!(
                "the last run (tick {}) {how}",
                run.tick
            )));
        }
        Ok(Decision::Proceed)
    }
}

export!(OfficeHours);
