//! `max-ticks`: completes the loop after a fixed number of ticks.

use crate::{Context, Decision, Gate, Log};
use serde::Deserialize;

pub struct MaxTicks;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Ticks the loop runs in all; at least 1.
    pub max: u64,
}

impl Gate for MaxTicks {
    const NAME: &'static str = "max-ticks";
    const DESCRIPTION: &'static str = "Completes the loop once `max` ticks have run. After the \
        step it completes right after tick `max`; before the step, instead of running tick \
        `max + 1`.";
    const PARAMS_SCHEMA: &'static str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "max-ticks params",
  "type": "object",
  "properties": {
    "max": {
      "description": "Ticks the loop runs in all.",
      "type": "integer",
      "minimum": 1
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
        if ctx.tick >= p.max {
            return Ok(Decision::Complete(format!(
                "done: {} ticks ran (max {})",
                ctx.tick, p.max
            )));
        }
        Ok(Decision::Proceed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Phase, check_params, evaluate};

    fn decide(tick: u64, phase: Phase) -> Decision {
        let ctx = Context {
            tick,
            phase,
            params: String::from(r#"{"max": 3}"#),
            ..Context::default()
        };
        evaluate::<MaxTicks>(&ctx, &mut Log::default()).unwrap()
    }

    #[test]
    fn completes_once_max_ticks_ran() {
        for phase in [Phase::BeforeStep, Phase::AfterStep] {
            assert_eq!(decide(0, phase), Decision::Proceed);
            assert_eq!(decide(2, phase), Decision::Proceed);
            assert_eq!(
                decide(3, phase),
                Decision::Complete(String::from("done: 3 ticks ran (max 3)"))
            );
            assert!(matches!(decide(4, phase), Decision::Complete(_)));
        }
    }

    #[test]
    fn params_are_checked() {
        assert_eq!(
            check_params::<MaxTicks>(r#"{"max": 0}"#).unwrap_err(),
            "invalid params: max: must be at least 1, got 0"
        );
        assert!(
            check_params::<MaxTicks>(r#"{"ticks": 3}"#)
                .unwrap_err()
                .contains("unknown field `ticks`")
        );
    }
}
