//! The tick's part of the record of the rules (docs/ticks.md, "The record
//! of config changes"): a config changed since it was last recorded is
//! recorded before anything else happens; a change to the rules that
//! awaits an approval keeps the loop awaiting, before any gate or step
//! runs, until approvals release it.

use super::Tick;
use crate::domain::Decision;
use crate::history::{Dropped, EventKind};
use crate::rules::{self, Via};
use crate::state::{Asked, Moment, State};

impl Tick<'_> {
    /// Records the config this tick runs with when it differs from the one
    /// last recorded.
    pub(super) fn take_in_config(&mut self, state: &mut State) {
        let policy = self.config.approval.config_changes;
        if let Some(change) = rules::take_in(state, &self.current, policy, Via::Outside, None) {
            self.events.push(EventKind::ConfigChanged { change });
        }
    }

    /// With a change to the rules awaiting an approval: opens its await
    /// (ending one opened before the change, whose approvals did not see
    /// it), and uses the approvals that release it. The await's reason
    /// while it holds, and whether the state changed; none when the tick
    /// goes on.
    pub(super) fn await_config(&mut self, state: &mut State) -> Option<(String, bool)> {
        let recorded = state.recorded_config.as_ref()?;
        let unapproved = recorded.unapproved.as_ref()?;
        let reason = unapproved.reason(&recorded.loop_toml);
        let sha = recorded.loop_toml.clone();
        let ours = unapproved.await_id.clone();
        let mut changed = false;
        if ours.is_none() || state.awaiting.as_ref().map(|a| &a.id) != ours.as_ref() {
            self.open_config_await(state, &reason);
            changed = true;
        }
        let open = state.awaiting.as_ref().map(|a| a.id.clone());
        if let Some(used) = state.release(self.config.approval.required) {
            self.events.push(EventKind::ApprovalsUsed {
                tick: self.number,
                ids: used.iter().map(|a| a.id.clone()).collect(),
                by: used.into_iter().map(|a| a.by).collect(),
                await_id: open.clone(),
                approved_config: Some(sha),
            });
            if let Some((_, left)) = state.close_await() {
                self.drop_approvals(open, left, Dropped::Released, None);
            }
            if let Some(r) = &mut state.recorded_config {
                r.unapproved = None;
            }
            state.apply(&Decision::Proceed, Moment::BeforeStep);
            return None;
        }
        let was = state.status;
        state.apply(&Decision::AwaitApproval(reason.clone()), Moment::BeforeStep);
        Some((reason, changed || was != state.status))
    }

    /// Ends the await that is open (its approvals were given before the
    /// change) and opens one for the change.
    fn open_config_await(&mut self, state: &mut State, reason: &str) {
        if let Some((closed, left)) = state.close_await() {
            self.drop_approvals(Some(closed.id), left, Dropped::ConfigChanged, None);
        }
        let asked = vec![Asked {
            gate: rules::AWAIT_GATE.to_owned(),
            version: None,
            reason: reason.to_owned(),
        }];
        let opened = state.open_await(
            self.number,
            asked,
            crate::state::At::head(None),
            crate::clock::now(),
        );
        if let Some(opened) = opened {
            if let Some(u) = state.recorded_config.as_mut().and_then(|r| r.unapproved.as_mut()) {
                u.await_id = Some(opened.id.clone());
            }
            self.events.push(EventKind::Awaiting { awaiting: opened });
        }
    }
}
