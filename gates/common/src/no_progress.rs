//! `no-progress`: halts the loop when its step has left the worktree
//! unchanged for a number of ticks in a row.

use crate::{Context, Decision, Gate, Log};
use serde::Deserialize;

pub struct NoProgress;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Unchanged ticks in a row that halt the loop; at least 1.
    pub max: u32,
}

impl Gate for NoProgress {
    const NAME: &'static str = "no-progress";
    const DESCRIPTION: &'static str = "Halts the loop when its step has left the loop's git \
        worktree unchanged `max` ticks in a row. A loop without a worktree is let through.";
    const PARAMS_SCHEMA: &'static str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "no-progress params",
  "type": "object",
  "properties": {
    "max": {
      "description": "Ticks in a row without a change to the worktree that halt the loop.",
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

    fn decide(p: &Params, ctx: &Context, log: &mut Log) -> Result<Decision, String> {
        let Some(last) = &ctx.last_run else {
            log.debug("no tick has run yet");
            return Ok(Decision::Proceed);
        };
        if last.worktree_changed.is_none() {
            log.info("the loop has no worktree, so there is no progress to watch");
            return Ok(Decision::Proceed);
        }
        let unchanged = ctx.unchanged_ticks;
        if unchanged >= p.max {
            let ticks = if unchanged == 1 { "tick" } else { "ticks" };
            return Ok(Decision::Halt(format!(
                "no progress: the worktree did not change for {unchanged} {ticks} in a row (limit {})",
                p.max
            )));
        }
        Ok(Decision::Proceed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Phase, RunResult, check_params, evaluate};

    fn decide(unchanged: u32, changed: Option<Option<bool>>) -> (Decision, Log) {
        let ctx = Context {
            tick: 9,
            phase: Phase::AfterStep,
            unchanged_ticks: unchanged,
            last_run: changed.map(|worktree_changed| RunResult {
                tick: 9,
                worktree_changed,
                ..RunResult::default()
            }),
            params: String::from(r#"{"max": 3}"#),
            ..Context::default()
        };
        let mut log = Log::default();
        let decision = evaluate::<NoProgress>(&ctx, &mut log).unwrap();
        (decision, log)
    }

    #[test]
    fn halts_after_max_unchanged_ticks() {
        assert_eq!(decide(0, Some(Some(true))).0, Decision::Proceed);
        assert_eq!(decide(2, Some(Some(false))).0, Decision::Proceed);
        assert_eq!(
            decide(3, Some(Some(false))).0,
            Decision::Halt(String::from(
                "no progress: the worktree did not change for 3 ticks in a row (limit 3)"
            ))
        );
    }

    #[test]
    fn a_loop_without_a_worktree_proceeds_and_says_so() {
        let (decision, log) = decide(5, Some(None));
        assert_eq!(decision, Decision::Proceed);
        assert!(log.lines[0].1.contains("no worktree"));
    }

    #[test]
    fn the_first_tick_proceeds() {
        assert_eq!(decide(0, None).0, Decision::Proceed);
    }

    #[test]
    fn params_are_checked() {
        assert_eq!(
            check_params::<NoProgress>(r#"{"max": 0}"#).unwrap_err(),
            "invalid params: max: must be at least 1, got 0"
        );
        assert!(check_params::<NoProgress>(r#"{"max": 3}"#).is_ok());
    }
}
