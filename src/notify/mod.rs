//! `[notify]`: tells people that a loop needs them, has stopped, started
//! failing, or was acted on by someone (docs/notify.md). Whoever changed
//! the loop (the `tick` command, the daemon's worker, an operator's
//! command) notifies once the loop's lock is free (so the command may run
//! `automaton` on the loop itself), through `tick::after`: the command in
//! `[notify] command` is run and the webhook in `[notify] webhook` is
//! called with the same [`Notice`], which carries the work since the last
//! approval as `review` shows it ([`crate::since`]); in the console both
//! go to queues that run them after the answer (`later`, `queue`). Never
//! fails: a problem is logged.
//!
//! Which ticks notify, by `on`: `await` when a tick leaves the loop
//! awaiting approval (when the wait starts, not at every firing), `halt`
//! and `complete` when it stops the loop, `failure` when its step,
//! verifier or worktree failed and the tick before it had not (the first
//! of a run of failures: a loop failing all night is heard of once, and
//! again only after a tick that did not fail). A tick that is several of
//! these sends one notice, of the first the loop's `on` lists in the
//! order halt, complete, await, failure, shadow (a shadow gate's first
//! disagreement with the live gates, since it was added or promoted). `operator`: a pause, resume,
//! approval, rejection or cancel that changed something.

mod command;
pub(crate) mod later;
mod notice;
mod queue;
pub(crate) mod webhook;

pub(crate) use notice::{Facts, Notice, Operation, Work};

use crate::config::LoopConfig;
use crate::config::notify::{Kind, review_url};
use crate::root::Root;
use crate::since::Since;
use crate::state::Outcome;
use crate::store::LoopStore;
use crate::tick::TickReport;

/// Notifies of the tick `report` tells of, if the loop's `on` lists what
/// it did.
pub(crate) fn after_tick(root: &Root, store: &dyn LoopStore, report: &TickReport) {
    let Some(facts) = &report.facts else { return };
    let kinds = tick_kinds(report, facts);
    if kinds.is_empty() {
        return;
    }
    let name = report.loop_name.as_str();
    let config = match store.config() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!("loop {name:?}: cannot read its [notify] settings: {e}");
            return;
        }
    };
    let Some(on) = config.notify.as_ref().map(|n| &n.on) else {
        return;
    };
    let Some(kind) = kinds.into_iter().find(|k| on.contains(k)) else {
        return;
    };
    let reason = match kind {
        Kind::Shadow => Some(format!(
            "shadow gate {} disagreed with the live gates for the first time (`automaton status {name}`)",
            report.first_disagreed.join(", ")
        )),
        _ => report.reason.clone(),
    };
    let mut notice = Notice::new(kind, name, (**facts).clone(), reason, root.path());
    notice.tick = report.tick;
    send(root, store, &config, notice);
}

/// What the tick was, as `on` names it, the one notified first.
fn tick_kinds(report: &TickReport, facts: &Facts) -> Vec<Kind> {
    let mut kinds = Vec::new();
    match report.outcome {
        Outcome::Halted => kinds.push(Kind::Halt),
        Outcome::Completed => kinds.push(Kind::Complete),
        _ => {}
    }
    if report.started_waiting {
        kinds.push(Kind::Await);
    }
    if report.failed() && facts.consecutive_failures == 1 {
        kinds.push(Kind::Failure);
    }
    if !report.first_disagreed.is_empty() {
        kinds.push(Kind::Shadow);
    }
    kinds
}

/// Notifies of an operator's `notice` on the loop `store`, if its `on`
/// lists `operator`.
pub(crate) fn operated(root: &Root, store: &dyn LoopStore, notice: Notice) {
    let config = match store.config() {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(
                "loop {:?}: cannot read its [notify] settings: {e}",
                store.name().as_str()
            );
            return;
        }
    };
    if config
        .notify
        .as_ref()
        .is_some_and(|n| n.on.contains(&Kind::Operator))
    {
        send(root, store, &config, notice);
    }
}

/// Runs the command and calls the webhook of `config` (loop `store`'s)
/// for `notice`, told the work since the last approval.
fn send(root: &Root, store: &dyn LoopStore, config: &LoopConfig, mut notice: Notice) {
    let Some(notify) = &config.notify else { return };
    let server = config.server.url.as_ref().or(root.settings().server.url.as_ref());
    notice.review_url = server.map(|s| review_url(s, &notice.loop_name));
    since_approval(store, &mut notice);
    if let Some(c) = &notify.command {
        later::run(c, config, root, store.base_dir(), &notice);
    }
    if let Some(url) = &notify.webhook {
        webhook::send(webhook::Delivery {
            url: url.clone(),
            body: notice.to_json(),
            bound: notify.webhook_timeout.map_or(webhook::DEFAULT_TIMEOUT, |d| d.0),
            loop_name: notice.loop_name.clone(),
        });
    }
}

/// Tells `notice` the work since the last approval, as `review` shows it
/// now; what cannot be read is logged and left out.
fn since_approval(store: &dyn LoopStore, notice: &mut Notice) {
    let read = store.load().and_then(|s| Ok((s, store.history()?)));
    let (state, history) = match read {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(
                "loop {:?}: its notice leaves out the work since the last approval: {e}",
                notice.loop_name
            );
            return;
        }
    };
    let since = Since::of(&history.events);
    notice.work = since.range(&state).map(Work::of);
    notice.metrics_since = since.metrics(store);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::State;

    fn report(outcome: Outcome, failures: u32) -> (TickReport, Facts) {
        let mut state = State::new(crate::clock::now());
        state.consecutive_failures = failures;
        let report = TickReport {
            loop_name: "agent".into(),
            tick: 3,
            outcome,
            reason: None,
            decisions: Vec::new(),
            step: None,
            verifier: None,
            recovered_crash: None,
            crashed_started: None,
            started_waiting: false,
            facts: None,
            first_disagreed: Vec::new(),
        };
        (report, Facts::of(&state))
    }

    #[test]
    fn a_failure_is_the_first_of_a_run_and_a_halt_comes_first() {
        let (failed, first) = report(Outcome::Failed, 1);
        assert_eq!(tick_kinds(&failed, &first), [Kind::Failure]);
        let (_, again) = report(Outcome::Failed, 2);
        assert!(tick_kinds(&failed, &again).is_empty(), "the second of a run");
        let (ran, _) = report(Outcome::Ran, 0);
        assert!(tick_kinds(&ran, &first).is_empty());
        let (mut halted, _) = report(Outcome::Halted, 1);
        assert_eq!(
            tick_kinds(&halted, &first),
            [Kind::Halt],
            "a halt that is no failure"
        );
        halted.step = failed_step();
        assert_eq!(tick_kinds(&halted, &first), [Kind::Halt, Kind::Failure]);
    }

    fn failed_step() -> Option<crate::state::ProcessOutcome> {
        Some(crate::state::ProcessOutcome {
            exit_code: Some(1),
            signal: None,
            duration_ms: 5,
            timed_out: false,
        })
    }
}
