//! `approve-every`: the loop runs `every` ticks, then waits for an operator's
//! approval before each next batch.

use crate::{Context, Decision, Gate, Log};
use serde::Deserialize;

pub struct ApproveEvery;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Ticks per batch; at least 1.
    pub every: u64,
}

impl Gate for ApproveEvery {
    const NAME: &'static str = "approve-every";
    const DESCRIPTION: &'static str = "Runs `every` ticks, then waits for an operator's approval \
        (`automaton approve`) before each next batch of `every` ticks.";
    const PARAMS_SCHEMA: &'static str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "approve-every params",
  "type": "object",
  "properties": {
    "every": {
      "description": "Ticks the loop runs between two approvals.",
      "type": "integer",
      "minimum": 1
    }
  },
  "required": ["every"],
  "additionalProperties": false
}"#;

    type Params = Params;

    fn validate(p: &Params) -> Result<(), String> {
        if p.every == 0 {
            return Err(String::from("every: must be at least 1, got 0"));
        }
        Ok(())
    }

    /// Works in either phase: before the step, `tick` counts the ticks already
    /// run, so the gate asks before tick `every + 1`; after the step it counts
    /// this one, so the loop waits right after tick `every`. Either way the
    /// host consumes a pending approval, so the gate only says when one is due.
    fn decide(p: &Params, ctx: &Context, log: &mut Log) -> Result<Decision, String> {
        if ctx.tick > 0 && ctx.tick.is_multiple_of(p.every) {
            let pending = ctx.pending_approvals.len();
            if pending > 0 {
                log.debug(format!(
                    "{pending} approval(s) pending; the host will use one"
                ));
            }
            let ticks = if p.every == 1 {
                "1 tick"
            } else {
                &format!("{} ticks", p.every)
            };
            return Ok(Decision::AwaitApproval(format!(
                "approval needed: {ticks} since the last one ({} in all)",
                ctx.tick
            )));
        }
        Ok(Decision::Proceed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Approval, Phase, check_params, evaluate};

    fn decide(every: u64, tick: u64) -> Decision {
        let ctx = Context {
            tick,
            params: format!(r#"{{"every": {every}}}"#),
            ..Context::default()
        };
        evaluate::<ApproveEvery>(&ctx, &mut Log::default()).unwrap()
    }

    #[test]
    fn asks_after_every_batch() {
        assert_eq!(decide(5, 0), Decision::Proceed);
        for tick in 1..5 {
            assert_eq!(decide(5, tick), Decision::Proceed, "tick {tick}");
        }
        assert_eq!(
            decide(5, 5),
            Decision::AwaitApproval(String::from(
                "approval needed: 5 ticks since the last one (5 in all)"
            ))
        );
        assert_eq!(decide(5, 6), Decision::Proceed);
        assert!(matches!(decide(5, 10), Decision::AwaitApproval(_)));
    }

    #[test]
    fn every_one_asks_before_each_tick_but_the_first() {
        assert_eq!(decide(1, 0), Decision::Proceed);
        assert_eq!(
            decide(1, 1),
            Decision::AwaitApproval(String::from(
                "approval needed: 1 tick since the last one (1 in all)"
            ))
        );
        assert!(matches!(decide(1, 2), Decision::AwaitApproval(_)));
    }

    #[test]
    fn asks_even_with_approvals_pending_and_in_after_step() {
        let ctx = Context {
            tick: 5,
            phase: Phase::AfterStep,
            params: String::from(r#"{"every": 5}"#),
            pending_approvals: vec![Approval::default()],
            ..Context::default()
        };
        let mut log = Log::default();
        assert!(matches!(
            evaluate::<ApproveEvery>(&ctx, &mut log),
            Ok(Decision::AwaitApproval(_))
        ));
        assert_eq!(log.lines.len(), 1);
    }

    #[test]
    fn params_are_checked() {
        assert!(check_params::<ApproveEvery>(r#"{"every": 3}"#).is_ok());
        assert_eq!(
            check_params::<ApproveEvery>(r#"{"every": 0}"#).unwrap_err(),
            "invalid params: every: must be at least 1, got 0"
        );
        assert!(
            check_params::<ApproveEvery>(r#"{"every": -1}"#)
                .unwrap_err()
                .starts_with("invalid params: every: invalid value")
        );
        assert!(
            check_params::<ApproveEvery>(r#"{"every": 2, "x": 1}"#)
                .unwrap_err()
                .contains("unknown field `x`")
        );
        assert_eq!(
            check_params::<ApproveEvery>("{}").unwrap_err(),
            "invalid params: missing field `every`"
        );
    }
}
