//! `max-failures`: halts the loop once its step (or verifier) has failed
//! `max` ticks in a row.

use crate::{Context, Decision, Gate, Log};
use serde::Deserialize;

pub struct MaxFailures;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Failures in a row that halt the loop; at least 1.
    pub max: u32,
}

impl Gate for MaxFailures {
    const NAME: &'static str = "max-failures";
    const DESCRIPTION: &'static str = "Halts the loop when its step or verifier has failed `max` \
        ticks in a row. After the step it halts right after the failure that reaches the limit; \
        before the step, instead of running the next tick.";
    const PARAMS_SCHEMA: &'static str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "max-failures params",
  "type": "object",
  "properties": {
    "max": {
      "description": "Failed ticks in a row that halt the loop.",
      "type": "integer",
      "minimum": 1,
      "maximum": 4294967295
    }
  },
  "required": ["max"],
  "additionalProperties": false
}"#;

    type Params = Params;

    fn validate(p: &Params) -> Result<(), String> {
        if p.max == 0 {
            return Err(String::from("max: must be at least 1, got 0"));
        }
        Ok(())
    }

    fn decide(p: &Params, ctx: &Context, _log: &mut Log) -> Result<Decision, String> {
        let failures = ctx.consecutive_failures;
        if failures >= p.max {
            let noun = if failures == 1 { "failure" } else { "failures" };
            return Ok(Decision::Halt(format!(
                "{failures} {noun} in a row (limit {})",
                p.max
            )));
        }
        Ok(Decision::Proceed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Phase, check_params, evaluate};

    fn decide(max: u32, failures: u32, phase: Phase) -> Decision {
        let ctx = Context {
            phase,
            tick: 7,
            consecutive_failures: failures,
            params: format!(r#"{{"max": {max}}}"#),
            ..Context::default()
        };
        evaluate::<MaxFailures>(&ctx, &mut Log::default()).unwrap()
    }

    #[test]
    fn halts_at_the_limit_in_either_phase() {
        for phase in [Phase::BeforeStep, Phase::AfterStep] {
            assert_eq!(decide(3, 0, phase), Decision::Proceed);
            assert_eq!(decide(3, 2, phase), Decision::Proceed);
            assert_eq!(
                decide(3, 3, phase),
                Decision::Halt(String::from("3 failures in a row (limit 3)"))
            );
            assert_eq!(
                decide(3, 9, phase),
                Decision::Halt(String::from("9 failures in a row (limit 3)"))
            );
        }
        assert_eq!(
            decide(1, 1, Phase::AfterStep),
            Decision::Halt(String::from("1 failure in a row (limit 1)"))
        );
    }

    #[test]
    fn params_are_checked() {
        assert_eq!(
            check_params::<MaxFailures>(r#"{"max": 0}"#).unwrap_err(),
            "invalid params: max: must be at least 1, got 0"
        );
        assert!(
            check_params::<MaxFailures>(r#"{"max": 1.5}"#)
                .unwrap_err()
                .starts_with("invalid params: max: invalid type")
        );
        assert!(
            check_params::<MaxFailures>(r#"{"max": 2, "min": 1}"#)
                .unwrap_err()
                .contains("unknown field `min`")
        );
    }
}
