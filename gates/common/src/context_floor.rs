//! `context-floor`: halts the loop when the step reports that a metric (by
//! default `context_left`) fell below a floor.

use crate::params::{finite, metric};
use crate::{Context, Decision, Gate, Log};
use serde::Deserialize;

pub struct ContextFloor;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The floor: a reported value below it halts the loop.
    pub min: f64,
    /// The metric the step reports, `context_left` when not given.
    #[serde(default = "default_metric")]
    pub metric: String,
}

fn default_metric() -> String {
    String::from("context_left")
}

impl Gate for ContextFloor {
    const NAME: &'static str = "context-floor";
    const DESCRIPTION: &'static str = "Halts the loop when the metric the step last reported \
        (`context_left` unless `metric` says otherwise) is below `min`. A step that does not \
        report the metric is let through.";
    const PARAMS_SCHEMA: &'static str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "context-floor params",
  "type": "object",
  "properties": {
    "min": {
      "description": "The floor: a last reported value below it halts the loop.",
      "type": "number"
    },
    "metric": {
      "description": "The metric the step reports (AUTOMATON_METRICS).",
      "type": "string",
      "minLength": 1,
      "default": "context_left"
    }
  },
  "required": ["min"],
  "additionalProperties": false
}"#;

    type Params = Params;

    fn validate(p: &Params) -> Result<(), String> {
        finite("min", p.min)?;
        if p.metric.is_empty() {
            return Err(String::from("metric: must not be empty"));
        }
        Ok(())
    }

    /// Before the step it reads what the previous tick reported; after the
    /// step, what this tick reported.
    fn decide(p: &Params, ctx: &Context, log: &mut Log) -> Result<Decision, String> {
        let Some(value) = metric(&ctx.metrics, "metric", &p.metric)? else {
            log.info(format!(
                "the step reported no {} metric; nothing to check",
                p.metric
            ));
            return Ok(Decision::Proceed);
        };
        if value < p.min {
            return Ok(Decision::Halt(format!(
                "context running low: {} {value} < {}",
                p.metric, p.min
            )));
        }
        Ok(Decision::Proceed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{check_params, evaluate};

    fn decide(params: &str, metrics: &str) -> (Result<Decision, String>, Log) {
        let ctx = Context {
            tick: 3,
            params: params.into(),
            metrics: metrics.into(),
            ..Context::default()
        };
        let mut log = Log::default();
        (evaluate::<ContextFloor>(&ctx, &mut log), log)
    }

    #[test]
    fn halts_below_the_floor() {
        let p = r#"{"min": 0.1}"#;
        assert_eq!(
            decide(p, r#"{"context_left": 0.08}"#).0,
            Ok(Decision::Halt(String::from(
                "context running low: context_left 0.08 < 0.1"
            )))
        );
        assert_eq!(
            decide(p, r#"{"context_left": 0.1}"#).0,
            Ok(Decision::Proceed)
        );
        assert_eq!(
            decide(p, r#"{"context_left": 0.5, "cost_usd": 1}"#).0,
            Ok(Decision::Proceed)
        );
    }

    #[test]
    fn another_metric_can_be_named() {
        let p = r#"{"min": 2000, "metric": "tokens_left"}"#;
        assert!(matches!(
            decide(p, r#"{"tokens_left": 1999}"#).0,
            Ok(Decision::Halt(_))
        ));
        assert_eq!(
            decide(p, r#"{"tokens_left": 2000, "context_left": 0}"#).0,
            Ok(Decision::Proceed)
        );
    }

    #[test]
    fn an_absent_metric_proceeds_and_says_so() {
        let (decision, log) = decide(r#"{"min": 0.1}"#, "{}");
        assert_eq!(decision, Ok(Decision::Proceed));
        assert_eq!(log.lines.len(), 1);
        assert!(log.lines[0].1.contains("no context_left metric"));
    }

    #[test]
    fn a_metric_that_is_not_a_number_is_an_error() {
        assert_eq!(
            decide(r#"{"min": 0.1}"#, r#"{"context_left": "low"}"#).0,
            Err(String::from(
                "metric context_left is not a number but a string"
            ))
        );
    }

    #[test]
    fn params_are_checked() {
        assert_eq!(
            check_params::<ContextFloor>("{}").unwrap_err(),
            "invalid params: missing field `min`"
        );
        assert_eq!(
            check_params::<ContextFloor>(r#"{"min": 1, "metric": ""}"#).unwrap_err(),
            "invalid params: metric: must not be empty"
        );
        assert!(
            check_params::<ContextFloor>(r#"{"min": "10%"}"#)
                .unwrap_err()
                .starts_with("invalid params: min: invalid type")
        );
    }
}
