//! A gate's logs as a verdict keeps them: the sandbox's log lines, bounded,
//! as `--json` and history show them.

use crate::domain::LOG_LINES;

/// The lines a verdict keeps of a gate's logs: the `log` import's as
/// `LEVEL: message`, stdout's and stderr's as `stdout: ...`, `stderr: ...`;
/// past [`LOG_LINES`], a line saying how many more there were.
pub(crate) fn kept_logs(logs: &[super::GateLog]) -> Vec<String> {
    let mut kept: Vec<String> = logs
        .iter()
        .take(LOG_LINES)
        .map(|l| {
            let from = match l.source {
                super::LogSource::Host => l.level.as_str(),
                super::LogSource::Stdout => "stdout",
                super::LogSource::Stderr => "stderr",
            };
            crate::bounds::text(format!("{from}: {}", l.message.trim_end()))
        })
        .collect();
    if logs.len() > LOG_LINES {
        kept.push(format!("… {} more lines", logs.len() - LOG_LINES));
    }
    kept
}
