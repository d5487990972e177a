//! The evidence of a shadow gate (`mode = "shadow"`): over its last
//! [`WINDOW`] evaluations recorded in history, how many agreed with the
//! live side and where they did not. `status`, the console's loop page,
//! `gate promote` and the notice of a first disagreement read it from here.

use serde::Serialize;

pub(crate) use crate::domain::Disagreement;
use crate::history::{Event, EventKind};

/// How many of a shadow gate's latest evaluations its evidence counts.
pub(crate) const WINDOW: usize = 50;

/// A shadow gate's record over its latest evaluations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Evidence {
    /// The shadow gate, as loop.toml writes it.
    pub gate: String,
    /// The most evaluations counted.
    pub window: usize,
    /// Its evaluations counted (at most `window`).
    pub evaluations: usize,
    /// Of those, the ones that agreed with the live side.
    pub agreed: usize,
    /// The newest disagreement, when there was one in the window.
    pub last_disagreement: Option<Disagreement>,
    /// Every disagreement in the window, oldest first (`gate promote`
    /// records them; `status` shows the last).
    #[serde(skip)]
    pub disagreements: Vec<Disagreement>,
}

/// The evidence of shadow gate `gate` in `events` (oldest first), over
/// its last `window` evaluations.
pub(crate) fn evidence(events: &[Event], gate: &str, window: usize) -> Evidence {
    let mut seen: Vec<(bool, Disagreement)> = Vec::new();
    for e in events.iter().rev() {
        if seen.len() == window {
            break;
        }
        let EventKind::Gate {
            tick,
            verdict,
            shadow,
            ..
        } = &e.kind
        else {
            continue;
        };
        for s in shadow.iter().filter(|s| s.verdict.gate == gate) {
            seen.push((
                s.agrees,
                Disagreement {
                    tick: *tick,
                    at: e.at,
                    phase: s.verdict.phase,
                    live_gate: verdict.gate.clone(),
                    live: verdict.decision.clone(),
                    shadow: s.verdict.decision.clone(),
                },
            ));
        }
    }
    seen.truncate(window);
    seen.reverse();
    let agreed = seen.iter().filter(|(agrees, _)| *agrees).count();
    let disagreements: Vec<Disagreement> = seen
        .into_iter()
        .filter(|(agrees, _)| !agrees)
        .map(|(_, d)| d)
        .collect();
    Evidence {
        gate: gate.to_owned(),
        window,
        evaluations: agreed + disagreements.len(),
        agreed,
        last_disagreement: disagreements.last().cloned(),
        disagreements,
    }
}

/// The evidence of each shadow gate of `config`, in config order.
pub(crate) fn of_config(config: &crate::config::LoopConfig, events: &[Event]) -> Vec<Evidence> {
    config
        .gates
        .iter()
        .filter(|g| g.mode == crate::domain::Mode::Shadow)
        .map(|g| evidence(events, &g.source.to_string(), WINDOW))
        .collect()
}
