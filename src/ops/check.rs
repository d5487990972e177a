//! What a tick would find wrong with a loop's config before any tick runs:
//! its schedule and each of its gates, asked whether they accept their
//! params. `new`, `validate`, `edit` and the status view check with it.

use std::path::Path;

use crate::config::{ConfigError, LoopConfig};
use crate::domain::GateSource;
use crate::error::Result;
use crate::gate::GateHost;
use crate::root::Root;

/// What a tick would find wrong with a config that parsed: its schedule
/// and each of its gates, every problem of them at once (errors name
/// `shown`, gate paths are relative to `base`).
pub(crate) fn check_config(root: &Root, base: &Path, config: &LoopConfig, shown: &Path) -> Result<()> {
    let mut problems: Vec<ConfigError> = check_schedule(config, shown).into_iter().collect();
    problems.extend(check_gates(root, base, config, shown, MissingGate::Error)?);
    match ConfigError::all(problems) {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// A cron expression the daemon cannot read is refused here, not at its
/// first firing.
fn check_schedule(config: &LoopConfig, path: &Path) -> Option<ConfigError> {
    let s = config.schedule.as_ref()?;
    crate::daemon::When::of(s)
        .err()
        .map(|message| ConfigError::Schedule {
            path: path.to_owned(),
            message,
        })
}

/// What to make of a gate file that is not there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MissingGate {
    /// It may be copied in after `new`: the first tick judges it.
    Later,
    /// The loop's next tick would fail on it: an error now.
    Error,
}

/// Asks each gate whether it accepts its params, before any tick runs; gate
/// paths are relative to `loop_dir`, errors name `shown`, the file as the
/// operator wrote it. Every gate is checked, and every problem returned.
pub(crate) fn check_gates(
    root: &Root,
    loop_dir: &Path,
    config: &LoopConfig,
    shown: &Path,
    missing: MissingGate,
) -> Result<Vec<ConfigError>> {
    let mut problems = Vec::new();
    if config.gates.is_empty() {
        return Ok(problems);
    }
    let cache = root.cache_dir();
    let host = GateHost::new(cache.is_dir().then_some(cache))?;
    let policy = root.settings().gates.policy(&config.signing);
    for (i, g) in config.gates.iter().enumerate() {
        let invalid_at = |line: Option<usize>, message: String| ConfigError::Gate {
            path: shown.to_owned(),
            line,
            index: i + 1,
            gate: g.source.to_string(),
            message,
        };
        let invalid = |message: String| invalid_at(None, message);
        let source = g.resolved_source(loop_dir);
        match &source {
            GateSource::File { path, .. } if !path.exists() => {
                if missing == MissingGate::Error {
                    let hint = crate::suggest::file_hint(&g.source.to_string(), path);
                    problems.push(invalid(format!("{} does not exist{hint}", path.display())));
                    continue;
                }
                tracing::warn!(
                    "gate {} is not there yet ({}); its params are checked at the first tick",
                    g.source,
                    path.display()
                );
                continue;
            }
            GateSource::Stock(name) if !crate::gate::stock_gates().iter().any(|s| s.name == name) => {
                let names: Vec<String> = crate::gate::stock_gates()
                    .iter()
                    .map(|s| s.name.to_owned())
                    .collect();
                let hint = crate::suggest::hint(name, names.iter().map(String::as_str));
                problems.push(invalid(format!(
                    "no stock gate is named {name:?}{hint} (`automaton gate list` shows them)"
                )));
                continue;
            }
            _ => {}
        }
        // The message already names the gate; say only what is wrong.
        match host.load(&source) {
            Err(e) => problems.push(invalid(e.kind().to_string())),
            Ok(gate) => {
                if let Err(e) = host.verify(&gate, &source, &policy) {
                    problems.push(invalid(e.kind().to_string()));
                } else if let Err(e) = host.check_params(&gate, &g.params) {
                    problems.push(invalid_at(g.params_line, e.kind().to_string()));
                }
            }
        }
    }
    Ok(problems)
}
