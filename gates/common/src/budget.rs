//! `budget`: halts the loop once the running total of a metric the step
//! reports (money, tokens, ...) reaches a maximum.

use crate::number::number;
use crate::params::{finite, metric};
use crate::{Context, Decision, Gate, Log};
use serde::Deserialize;

pub struct Budget;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The metric whose total is capped. Required: a cap in dollars and a cap
    /// in tokens must not be confused.
    pub metric: String,
    /// The cap: a total at or above it halts the loop.
    pub max: f64,
}

impl Gate for Budget {
    const NAME: &'static str = "budget";
    const DESCRIPTION: &'static str = "Halts the loop when the total of `metric` over the loop's \
        life reaches `max`. After the step it halts as soon as the tick that spent the budget \
        ends; before the step, instead of starting another tick.";
    const PARAMS_SCHEMA: &'static str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "budget params",
  "type": "object",
  "properties": {
    "metric": {
      "description": "The metric the step reports, e.g. cost_usd or tokens.",
      "type": "string",
      "minLength": 1
    },
    "max": {
      "description": "The budget: a total at or above it halts the loop.",
      "type": "number",
      "exclusiveMinimum": 0
    }
  },
  "required": ["metric", "max"],
  "additionalProperties": false
}"#;

    type Params = Params;

    fn validate(p: &Params) -> Result<(), String> {
        if p.metric.is_empty() {
            return Err(String::from("metric: must not be empty"));
        }
        finite("max", p.max)?;
        if p.max <= 0.0 {
            return Err(format!("max: must be more than 0, got {}", p.max));
        }
        Ok(())
    }

    fn decide(p: &Params, ctx: &Context, log: &mut Log) -> Result<Decision, String> {
        let Some(total) = metric(&ctx.totals, "total", &p.metric)? else {
            log.debug(format!("no {} reported yet", p.metric));
            return Ok(Decision::Proceed);
        };
        if total >= p.max {
            return Ok(Decision::Halt(format!(
                "budget spent: {} {} ≥ {}",
                p.metric,
                number(total),
                number(p.max)
            )));
        }
        log.debug(format!(
            "{} {} of {} spent",
            p.metric,
            number(total),
            number(p.max)
        ));
        Ok(Decision::Proceed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Phase, check_params, evaluate};

    fn decide(totals: &str, phase: Phase) -> Result<Decision, String> {
        let ctx = Context {
            phase,
            params: String::from(r#"{"metric": "cost_usd", "max": 20.0}"#),
            totals: totals.into(),
            ..Context::default()
        };
        evaluate::<Budget>(&ctx, &mut Log::default())
    }

    #[test]
    fn halts_when_the_total_reaches_the_cap() {
        for phase in [Phase::BeforeStep, Phase::AfterStep] {
            assert_eq!(decide("{}", phase), Ok(Decision::Proceed));
            assert_eq!(
                decide(r#"{"cost_usd": 19.99}"#, phase),
                Ok(Decision::Proceed)
            );
            assert_eq!(
                decide(r#"{"cost_usd": 20}"#, phase),
                Ok(Decision::Halt(String::from(
                    "budget spent: cost_usd 20 ≥ 20"
                )))
            );
            assert_eq!(
                decide(r#"{"cost_usd": 20.4, "tokens": 1e9}"#, phase),
                Ok(Decision::Halt(String::from(
                    "budget spent: cost_usd 20.4 ≥ 20"
                )))
            );
        }
    }

    #[test]
    fn a_total_is_shown_as_the_host_shows_numbers() {
        let ctx = Context {
            params: String::from(r#"{"metric": "cost_usd", "max": 1.1}"#),
            totals: format!(r#"{{"cost_usd": {}}}"#, 0.37 + 0.37 + 0.37),
            ..Context::default()
        };
        assert_eq!(
            evaluate::<Budget>(&ctx, &mut Log::default()),
            Ok(Decision::Halt(String::from(
                "budget spent: cost_usd 1.11 ≥ 1.1"
            )))
        );
    }

    #[test]
    fn other_metrics_do_not_count() {
        assert_eq!(
            decide(r#"{"tokens": 100000}"#, Phase::BeforeStep),
            Ok(Decision::Proceed)
        );
    }

    #[test]
    fn a_total_that_is_not_a_number_is_an_error() {
        assert!(decide(r#"{"cost_usd": [1]}"#, Phase::BeforeStep).is_err());
        assert!(decide("not json", Phase::BeforeStep).is_err());
    }

    #[test]
    fn params_are_checked() {
        assert_eq!(
            check_params::<Budget>(r#"{"max": 20}"#).unwrap_err(),
            "invalid params: missing field `metric`"
        );
        assert_eq!(
            check_params::<Budget>(r#"{"metric": "cost_usd", "max": 0}"#).unwrap_err(),
            "invalid params: max: must be more than 0, got 0"
        );
        assert_eq!(
            check_params::<Budget>(r#"{"metric": "", "max": 1}"#).unwrap_err(),
            "invalid params: metric: must not be empty"
        );
        assert!(check_params::<Budget>(r#"{"metric": "tokens", "max": 5e6}"#).is_ok());
    }
}
