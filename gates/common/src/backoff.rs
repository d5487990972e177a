//! `backoff`: after failures, waits longer and longer before the next try
//! (exponential backoff, capped), skipping the ticks that come too early.

use crate::params::{HumanDuration, format_duration};
use crate::{Context, Decision, Gate, Log, Phase};
use serde::Deserialize;
use std::time::Duration;

pub struct Backoff;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The wait after the first failure.
    pub base: HumanDuration,
    /// The longest wait.
    pub max: HumanDuration,
    /// How much each further failure multiplies the wait; 2 when not given.
    #[serde(default = "default_factor")]
    pub factor: f64,
}

fn default_factor() -> f64 {
    2.0
}

impl Params {
    /// The wait after `failures` failures in a row (at least 1):
    /// `min(max, base * factor^(failures - 1))`.
    pub fn delay(&self, failures: u32) -> Duration {
        let (base, max) = (self.base.0, self.max.0);
        let exponent = failures.saturating_sub(1).min(i32::MAX as u32) as i32;
        let secs = base.as_secs_f64() * self.factor.powi(exponent);
        if !secs.is_finite() || secs >= max.as_secs_f64() {
            max
        } else {
            Duration::from_secs_f64(secs)
        }
    }
}

impl Gate for Backoff {
    const NAME: &'static str = "backoff";
    const DESCRIPTION: &'static str = "After failures, skips ticks until `base * factor^(failures \
        - 1)` (at most `max`) has passed since the last failed tick ended. Proceeds when the last \
        tick succeeded. Acts before the step.";
    const PARAMS_SCHEMA: &'static str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "backoff params",
  "type": "object",
  "properties": {
    "base": {
      "description": "The wait after the first failure, e.g. \"1m\" or \"90s\".",
      "type": "string"
    },
    "max": {
      "description": "The longest wait, e.g. \"1h\"; at least base.",
      "type": "string"
    },
    "factor": {
      "description": "What each further failure multiplies the wait by.",
      "type": "number",
      "minimum": 1,
      "default": 2
    }
  },
  "required": ["base", "max"],
  "additionalProperties": false
}"#;

    type Params = Params;

    fn validate(p: &Params) -> Result<(), String> {
        if p.base.0.is_zero() {
            return Err(String::from("base: must be longer than 0s"));
        }
        if p.max.0 < p.base.0 {
            return Err(format!(
                "max: must be at least base ({}), got {}",
                humantime::format_duration(p.base.0),
                humantime::format_duration(p.max.0)
            ));
        }
        if !p.factor.is_finite() || p.factor < 1.0 {
            return Err(format!(
                "factor: must be a number of at least 1, got {}",
                p.factor
            ));
        }
        Ok(())
    }

    /// After the step there is nothing left to hold back, so it proceeds.
    fn decide(p: &Params, ctx: &Context, log: &mut Log) -> Result<Decision, String> {
        if ctx.phase == Phase::AfterStep {
            log.debug("backoff only acts before the step");
            return Ok(Decision::Proceed);
        }
        let failures = ctx.consecutive_failures;
        if failures == 0 {
            return Ok(Decision::Proceed);
        }
        let Some(last) = &ctx.last_run else {
            log.info(format!(
                "{failures} failure(s) in a row but no last run to time the wait from"
            ));
            return Ok(Decision::Proceed);
        };
        let delay = p.delay(failures);
        let delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        let until = last.ended_at_ms.saturating_add(delay_ms);
        if ctx.now_ms < until {
            let noun = if failures == 1 { "failure" } else { "failures" };
            return Ok(Decision::Skip(format!(
                "backing off after {failures} {noun} in a row: {} left of a {} wait",
                format_duration(
                    Duration::from_millis(until - ctx.now_ms) + Duration::from_millis(999)
                ),
                format_duration(delay),
            )));
        }
        Ok(Decision::Proceed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RunResult, check_params, evaluate};

    const ENDED: u64 = 1_800_000_000_000;
    const MIN: u64 = 60_000;

    fn decide(params: &str, failures: u32, now_ms: u64) -> Decision {
        let ctx = Context {
            tick: 4,
            now_ms,
            consecutive_failures: failures,
            last_run: Some(RunResult {
                tick: 4,
                exit_code: Some(1),
                ended_at_ms: ENDED,
                ..RunResult::default()
            }),
            params: params.into(),
            ..Context::default()
        };
        evaluate::<Backoff>(&ctx, &mut Log::default()).unwrap()
    }

    const P: &str = r#"{"base": "1m", "max": "1h"}"#;

    #[test]
    fn no_failures_proceeds() {
        assert_eq!(decide(P, 0, ENDED), Decision::Proceed);
    }

    #[test]
    fn the_wait_doubles_per_failure_up_to_max() {
        // 1 failure: 1m, 2: 2m, 3: 4m, ... 7: 64m capped to 60m.
        for (failures, wait_min) in [(1, 1), (2, 2), (3, 4), (6, 32), (7, 60), (40, 60)] {
            let wait = wait_min * MIN;
            assert!(
                matches!(decide(P, failures, ENDED + wait - 1), Decision::Skip(_)),
                "{failures} failures, just before {wait_min}m"
            );
            assert_eq!(
                decide(P, failures, ENDED + wait),
                Decision::Proceed,
                "{failures} failures"
            );
        }
    }

    #[test]
    fn the_reason_says_how_long_is_left() {
        assert_eq!(
            decide(P, 3, ENDED + 90_000),
            Decision::Skip(String::from(
                "backing off after 3 failures in a row: 2m 30s left of a 4m wait"
            ))
        );
        assert_eq!(
            decide(P, 1, ENDED + 59_500),
            Decision::Skip(String::from(
                "backing off after 1 failure in a row: 1s left of a 1m wait"
            ))
        );
    }

    #[test]
    fn the_factor_can_be_set() {
        let p = r#"{"base": "10s", "max": "1h", "factor": 1.5}"#;
        // 3 failures: 10s * 1.5^2 = 22.5s.
        assert!(matches!(decide(p, 3, ENDED + 22_499), Decision::Skip(_)));
        assert_eq!(decide(p, 3, ENDED + 22_500), Decision::Proceed);
        let p = r#"{"base": "10s", "max": "1h", "factor": 1}"#;
        assert_eq!(decide(p, 30, ENDED + 10_000), Decision::Proceed);
    }

    #[test]
    fn a_clock_behind_the_last_run_still_waits() {
        assert!(matches!(decide(P, 1, ENDED - 5_000), Decision::Skip(_)));
    }

    #[test]
    fn after_the_step_or_without_a_last_run_it_proceeds() {
        let ctx = Context {
            phase: Phase::AfterStep,
            consecutive_failures: 2,
            now_ms: ENDED,
            last_run: Some(RunResult {
                ended_at_ms: ENDED,
                ..RunResult::default()
            }),
            params: P.into(),
            ..Context::default()
        };
        assert_eq!(
            evaluate::<Backoff>(&ctx, &mut Log::default()),
            Ok(Decision::Proceed)
        );
        let ctx = Context {
            phase: Phase::BeforeStep,
            last_run: None,
            ..ctx
        };
        let mut log = Log::default();
        assert_eq!(evaluate::<Backoff>(&ctx, &mut log), Ok(Decision::Proceed));
        assert_eq!(log.lines.len(), 1);
    }

    #[test]
    fn params_are_checked() {
        let err = |p: &str| check_params::<Backoff>(p).unwrap_err();
        assert!(
            err(r#"{"base": "1 minute-ish", "max": "1h"}"#)
                .starts_with(r#"invalid params: base: invalid duration "1 minute-ish""#)
        );
        assert_eq!(
            err(r#"{"base": "0s", "max": "1h"}"#),
            "invalid params: base: must be longer than 0s"
        );
        assert_eq!(
            err(r#"{"base": "2h", "max": "1h"}"#),
            "invalid params: max: must be at least base (2h), got 1h"
        );
        assert_eq!(
            err(r#"{"base": "1m", "max": "1h", "factor": 0.5}"#),
            "invalid params: factor: must be a number of at least 1, got 0.5"
        );
        assert!(
            err(r#"{"base": 60, "max": "1h"}"#)
                .starts_with("invalid params: base: invalid type: integer")
        );
        assert!(
            check_params::<Backoff>(r#"{"base": "90s", "max": "1h 30m", "factor": 3}"#).is_ok()
        );
    }
}
