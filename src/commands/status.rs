//! `status` and `list`: the views of [`crate::ops::views::status`],
//! rendered for the terminal (a table fitted to its width, one loop in
//! detail) or printed as JSON.

use std::io::Write;

use jiff::Timestamp;

use super::render::{ago, coarse, fitted_table, left, local, number, safe, table};
use crate::cli::StatusFilter;
use crate::error::{Exit, Result};
use crate::lock::Holder;
use crate::ops::Ctx;
use crate::ops::views::status::{self as views, clears, serving, unfired};
pub(crate) use crate::ops::views::status::{Listed, LoopView, view};
use crate::root::Root;
use crate::state::{Outcome, State};
use crate::store;

pub(crate) fn one(
    root: &Root,
    stores: &store::Stores,
    name: &str,
    json: bool,
    out: &mut dyn Write,
) -> Result<Exit> {
    let ctx = Ctx::own(root, stores);
    let v = views::status(&ctx, name)?;
    if json {
        super::emit_json(out, &v)?;
    } else {
        super::emit(out, &detail(&v))?;
    }
    Ok(Exit::Ok)
}

/// Whether a loop is in one of the statuses `list --status` names.
fn matches(v: &LoopView, filter: StatusFilter) -> bool {
    use crate::state::Status;
    if v.config_error.is_some() {
        return filter == StatusFilter::Invalid;
    }
    match filter {
        StatusFilter::Active => v.state.status == Status::Active,
        StatusFilter::Paused => v.state.status == Status::Paused,
        StatusFilter::AwaitingApproval => v.state.status == Status::AwaitingApproval,
        StatusFilter::Halted => v.state.status == Status::Halted,
        StatusFilter::Completed => v.state.status == Status::Completed,
        StatusFilter::Invalid => false,
        StatusFilter::Failing => v.state.consecutive_failures > 0,
    }
}

pub(crate) fn all(
    root: &Root,
    stores: &store::Stores,
    filter: &[StatusFilter],
    json: bool,
    out: &mut dyn Write,
) -> Result<Exit> {
    let ctx = Ctx::own(root, stores);
    let views::Listing { loops, first_error } = views::list(&ctx)?;
    let none = loops.is_empty();
    let listed: Vec<Listed> = loops
        .into_iter()
        .filter(|l| {
            filter.is_empty()
                || match l {
                    Listed::Loop(v) => filter.iter().any(|f| matches(v, *f)),
                    Listed::Unreadable { .. } => filter.contains(&StatusFilter::Invalid),
                }
        })
        .collect();
    if json {
        super::emit_json(out, &listed)?;
    } else if none {
        super::emit(out, &format!("no loops in {}\n", root.path().display()))?;
    } else if listed.is_empty() {
        super::emit(out, "no loops in that status\n")?;
    } else {
        super::emit(out, &summary(&listed, super::render::output_width()))?;
        super::emit(out, &daemon_lines(root, &listed))?;
    }
    // Every readable loop was shown; an unreadable one is the exit status.
    match first_error {
        Some(e) => Err(e),
        None => Ok(Exit::Ok),
    }
}

/// The table, fitted to `width` (the description is cut first, then the
/// schedule), then one line a loop that cannot be used, saying why, or
/// awaits approval, since when and the command that reviews it. The
/// APPROVALS and LOCK columns are there when a loop has approvals pending
/// or its lock held by an operator's command (a running tick shows in
/// STATUS instead).
fn summary(listed: &[Listed], width: Option<usize>) -> String {
    let loops = || {
        listed.iter().filter_map(|l| match l {
            Listed::Loop(v) => Some(v),
            Listed::Unreadable { .. } => None,
        })
    };
    let approvals = loops().any(|v| !v.state.pending_approvals.is_empty());
    let locks = loops().any(|v| v.lock.is_some() && v.running().is_none());
    let mut columns = vec!["LOOP", "STATUS", "TICK", "SCHEDULE", "NEXT", "LAST"];
    if approvals {
        columns.push("APPROVALS");
    }
    if locks {
        columns.push("LOCK");
    }
    columns.push("DESCRIPTION");
    let mut rows = vec![columns.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>()];
    let mut problems = String::new();
    for l in listed {
        match l {
            Listed::Loop(v) => {
                rows.push(summary_row(v, approvals, locks));
                if let Some(e) = &v.config_error {
                    problems += &format!("{}: {}\n", v.name, safe(e));
                } else if let Some(a) = awaiting(&v.state) {
                    problems += &format!("{}: awaiting {}\n", v.name, awaiting_words(&v.name, a));
                }
            }
            Listed::Unreadable { name, error } => {
                rows.push(vec![name.clone(), "unreadable".into()]);
                problems += &format!("{name}: {}\n", safe(error));
            }
        }
    }
    let description = columns.len() - 1;
    let mut text = fitted_table(&rows, width, &[(description, 0), (3, 9), (5, 9)]);
    if !problems.is_empty() {
        text.push('\n');
        text += &problems;
    }
    text
}

fn summary_row(v: &LoopView, approvals: bool, locks: bool) -> Vec<String> {
    let s = &v.state;
    let dash = || "-".to_owned();
    let last = match &s.last_tick {
        Some(t) => format!("{} {}", t.outcome, ago(t.ended_at)),
        None => "never".into(),
    };
    let status = match v.running() {
        Some((tick, since)) if v.config_error.is_none() => format!("running (tick {tick}, {})", took(since)),
        _ => v.shown_status(),
    };
    let next = match (v.next_due, v.overdue_by()) {
        (Some(_), Some(d)) => format!("overdue {}", coarse(d)),
        (Some(due), None) => left(due),
        (None, _) => dash(),
    };
    let mut row = vec![
        v.name.clone(),
        status,
        s.tick.to_string(),
        v.schedule_cadence().unwrap_or_else(dash),
        next,
        last,
    ];
    if approvals {
        row.push(s.pending_approvals.len().to_string());
    }
    if locks {
        let lock = match &v.lock {
            Some(h) if v.running().is_none() => lock_cell(h),
            _ => dash(),
        };
        row.push(lock);
    }
    row.push(v.description.clone().unwrap_or_default());
    row
}

/// How long since `t`: `10s`, `3m12s`.
fn took(t: Timestamp) -> String {
    let secs = crate::clock::now().duration_since(t).as_secs().max(0);
    coarse(std::time::Duration::from_secs(secs.unsigned_abs()))
}

/// `pid 4242 (pause)`, and the host when it is another.
fn lock_cell(h: &Holder) -> String {
    let host = match h.host == crate::who::host() {
        true => String::new(),
        false => format!(" on {}", h.host),
    };
    format!("pid {}{host} ({})", h.pid, h.command)
}

/// Below the table: the daemon serving the root (or the one that stopped),
/// and, when none does, the overdue loops that nothing fires (no installed
/// OS schedule either), said once.
fn daemon_lines(root: &Root, listed: &[Listed]) -> String {
    let status = crate::daemon::daemon_status(root);
    let mut text = match &status {
        Ok(Some(s)) => format!("{}\n", safe(&s.describe())),
        Ok(None) => String::new(),
        Err(e) => format!("daemon: {}\n", safe(&e.to_string())),
    };
    if serving(&status) {
        return text;
    }
    let stranded = unfired(
        root,
        listed.iter().filter_map(|l| match l {
            Listed::Loop(v) => Some(&**v),
            Listed::Unreadable { .. } => None,
        }),
    );
    if let Some(first) = stranded.first() {
        let (n, them) = match stranded.len() {
            1 => (format!("loop {first} is"), "it"),
            n => (format!("{n} loops are"), "them"),
        };
        // A stopped daemon's line has said already that none serves it.
        let none = match text.is_empty() {
            true => "no daemon serves this root, and ",
            false => "",
        };
        text += &format!(
            "{none}{n} overdue with no OS schedule: nothing fires {them}; \
             run `automaton daemon`, or `automaton schedule install NAME`\n"
        );
    }
    text
}

/// One loop in detail: a row each of what it is, how its ticks went,
/// what it holds and who holds it.
fn detail(v: &LoopView) -> String {
    let mut rows = Rows::default();
    rows.identity(v);
    rows.ticks(v);
    rows.approvals(&v.state);
    rows.holdings(v);
    rows.shadows(v);
    rows.budgets(v);
    let mut text = table(&rows.0);
    text += &config_record(v);
    text
}

/// The record of the rules: a change not yet recorded, one awaiting an
/// approval, and the changes since the last approval with their diffs.
fn config_record(v: &LoopView) -> String {
    let mut text = String::new();
    if v.unrecorded_config.is_some() {
        text += &format!("\n{}\n", super::review::UNRECORDED);
    }
    let recorded = v.state.recorded_config.as_ref();
    if let Some(u) = recorded.and_then(|r| r.unapproved.as_ref()) {
        let rules = crate::rules::names(&u.rules);
        text += &format!(
            "\na change to the rules ({rules}) awaits approval since {}\n",
            local(u.since)
        );
    }
    if v.config_changes.is_empty() {
        return text;
    }
    text += "\nconfig changes since the last approval:\n";
    for c in &v.config_changes {
        text += &format!("  {}\n", safe(&super::review::change_line(c)));
        for l in c.change.diff.lines() {
            text += &format!("    {}\n", safe(l));
        }
    }
    text
}

/// The rows of [`detail`]'s table: a key, then its value.
/// What `status` says of a loop whose step runs unconfined.
pub(crate) const UNCONFINED: &str =
    "unconfined ([step] confine = \"off\"): it runs with the runner's every right";

#[derive(Default)]
struct Rows(Vec<Vec<String>>);

/// A shadow gate's evidence in a line: `12 of 12 agreed`, and its last
/// disagreement.
pub(crate) fn shadow_line(e: &crate::ops::views::shadow::Evidence) -> String {
    let mut line = format!(
        "{}: {} of the last {} evaluations agreed",
        e.gate, e.agreed, e.evaluations
    );
    if let Some(d) = &e.last_disagreement {
        line += &format!(
            "; last disagreed at tick {} ({}): {} said {}, it said {}",
            d.tick,
            d.phase,
            d.live_gate,
            d.live.name(),
            d.shadow.name()
        );
    }
    line
}

impl Rows {
    /// Each budget it belongs to: spent and reserved of the cap, and when
    /// the window ends.
    fn budgets(&mut self, v: &LoopView) {
        for b in &v.budgets {
            let ends = match b
                .window_end_ms
                .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
            {
                Some(end) => format!(", window ends {}", local(end)),
                None => String::new(),
            };
            self.row(
                "budget",
                safe(&format!(
                    "{} ({}): spent {:.2} and reserved {:.2} of {} {:.2}{ends}",
                    b.name, b.window, b.spent, b.reserved, b.metric, b.cap
                ))
                .into_owned(),
            );
        }
    }

    /// Each shadow gate's evidence.
    fn shadows(&mut self, v: &LoopView) {
        for e in &v.shadows {
            self.row("shadow gate", safe(&shadow_line(e)).into_owned());
        }
    }

    fn row(&mut self, key: &str, value: String) {
        self.0.push(vec![key.to_owned(), value]);
    }

    /// Its name, description, status, config and schedule.
    fn identity(&mut self, v: &LoopView) {
        let s = &v.state;
        self.row("loop", v.name.clone());
        if let Some(d) = &v.description {
            self.row("description", d.clone());
        }
        let status = match (&v.config_error, &s.status_reason) {
            (Some(_), _) => format!("invalid (stored status {})", s.status),
            (None, Some(r)) => format!("{} ({r})", s.status),
            (None, None) => s.status.to_string(),
        };
        self.row("status", status);
        if let Some(a) = awaiting(s) {
            self.row("awaiting", awaiting_words(&v.name, a));
        }
        if v.unconfined {
            self.row("step", UNCONFINED.to_owned());
        }
        if let Some((gate, phase, tick)) = &v.stopped_by {
            self.row("stopped by", format!("gate {gate} ({phase}, tick {tick})"));
            self.row("to clear", clears(&v.name, gate));
        }
        self.row(
            "config",
            match &v.config_error {
                Some(e) => e.clone(),
                None => "valid".into(),
            },
        );
        if let Some(f) = &s.gate_error {
            self.row("gate error", format!("{} (since {})", f.error, local(f.since)));
        }
        self.row("schedule", v.schedule.clone().unwrap_or_else(|| "none".into()));
        if let Some(b) = v.os_schedule {
            self.row(
                "fired by",
                format!("{b}, its OS schedule (a daemon leaves it to {b})"),
            );
        }
        match (v.next_due, v.overdue_by()) {
            (Some(_), Some(d)) => {
                let since = jiff::SignedDuration::try_from(d)
                    .ok()
                    .and_then(|d| crate::clock::now().checked_sub(d).ok())
                    .unwrap_or(Timestamp::MIN);
                self.row(
                    "next due",
                    format!("overdue {} (came due {})", coarse(d), local(since)),
                );
            }
            (Some(due), None) => self.row("next due", format!("{} ({})", local(due), left(due))),
            (None, _) => {}
        }
        if v.unfired {
            self.row(
                "fired by",
                format!(
                    "nothing: no daemon serves this root and it has no OS schedule; \
                     run `automaton daemon`, or `automaton schedule install {}`",
                    v.name
                ),
            );
        }
        if let Some(m) = &v.last_missed {
            let firings = match m.count {
                1 => format!("1 firing, {}", local(m.at)),
                n => format!("{n} firings, {} to {}", local(m.at), local(m.last_at())),
            };
            let why = m.detail.as_deref().unwrap_or(&m.why);
            self.row(
                "last missed",
                format!("{firings}: {why} (automaton fires {})", v.name),
            );
        }
        if let Some(r) = &v.refused_firings {
            let firings = match r.count {
                1 => format!("1 firing, {}", local(r.at)),
                n => format!("{n} firings, {} to {}", local(r.at), local(r.last_at())),
            };
            let why = r.detail.as_deref().unwrap_or(&r.why);
            self.row("not ticked", format!("{firings}: {}", safe(why)));
        }
    }

    /// Its ticks: how many, the last and where its output is, failures.
    fn ticks(&mut self, v: &LoopView) {
        let s = &v.state;
        self.row("ticks", format!("{} (state version {})", s.tick, s.version));
        match &s.last_tick {
            Some(t) => {
                self.row("last tick", describe_last(t));
                if let Some(c) = &t.cancelled {
                    self.row("cancelled by", safe(&c.to_string()).into_owned());
                }
                match t.host.as_deref().filter(|h| *h != crate::who::host()) {
                    Some(h) => self.row(
                        "output",
                        format!("on host {h}: automaton logs {} {} there", v.name, t.number),
                    ),
                    None if v.last_run_dir.is_some() => self.row("output", output_hint(v, t)),
                    None => {}
                }
                self.last_output(v);
            }
            None => self.row("last tick", "never".into()),
        }
        self.row("failures", format!("{} in a row", s.consecutive_failures));
    }

    /// The last lines of each output of a failed last tick, standard
    /// error first: `step stderr  no space left`.
    fn last_output(&mut self, v: &LoopView) {
        for (file, lines) in &v.last_output {
            let key = match file.split_once('.') {
                Some((what, "err")) => format!("{what} stderr"),
                Some((what, "out")) => format!("{what} stdout"),
                _ => file.clone(),
            };
            for (i, line) in lines.iter().enumerate() {
                self.row(if i == 0 { &key } else { "" }, safe(line).into_owned());
            }
        }
    }

    /// The approvals pending, one row each.
    fn approvals(&mut self, s: &State) {
        if s.pending_approvals.is_empty() {
            self.row("approvals", "none pending".into());
            return;
        }
        for (i, a) in s.pending_approvals.iter().enumerate() {
            let mut text = format!("{} by {} {}", a.id, a.by, ago(a.at));
            if let Some(n) = &a.note {
                text += &format!(": {n}");
            }
            self.row(if i == 0 { "approvals" } else { "" }, text);
        }
    }

    /// What it holds and who holds it: totals, worktree, the tick in
    /// flight, the lock, and when it was made and last changed.
    fn holdings(&mut self, v: &LoopView) {
        let s = &v.state;
        if !s.totals.is_empty() {
            let totals: Vec<String> = s
                .totals
                .iter()
                .map(|(k, v)| format!("{k}={}", number(*v)))
                .collect();
            self.row("totals", totals.join(" "));
        }
        if let Some(w) = &s.worktree {
            self.row("worktree", format!("{} ({})", w.path.display(), w.branch));
        }
        if let Some(f) = &s.in_flight {
            self.row(
                "in flight",
                format!(
                    "tick {} by pid {} on {} since {}",
                    f.tick,
                    f.pid,
                    f.host,
                    local(f.started_at)
                ),
            );
        }
        self.row(
            "lock",
            v.lock
                .as_ref()
                .map_or_else(|| "free".to_owned(), |h| format!("held by {}", h.describe())),
        );
        self.row("created", local(s.created_at));
        self.row(
            "updated",
            format!("{} ({})", local(s.updated_at), ago(s.updated_at)),
        );
    }
}

/// The `logs` command that shows the last tick's output: the failed
/// verifier's, else the step's (`logs` shows its standard error when that
/// is all it wrote); or that it wrote nothing.
fn output_hint(v: &LoopView, t: &crate::state::LastTick) -> String {
    let command = format!("automaton logs {} {}", v.name, t.number);
    let Some(run) = v
        .last_run_dir
        .as_deref()
        .and_then(|p| crate::fsx::Dir::open(p).ok())
    else {
        return command;
    };
    let wrote = |what: &str| {
        [false, true].into_iter().any(|err| {
            run.open_read(crate::runs::output_name(what, err))
                .ok()
                .flatten()
                .is_some_and(|(_, len)| len > 0)
        })
    };
    let verifier_failed = t.verifier.as_ref().is_some_and(|r| !r.success());
    let both = |what: &str| {
        [false, true].into_iter().all(|err| {
            run.open_read(crate::runs::output_name(what, err))
                .ok()
                .flatten()
                .is_some_and(|(_, len)| len > 0)
        })
    };
    // Standard error too, when the process wrote to both: `logs` shows
    // standard output, and the reason is most often on the other.
    let with_stderr = |command: String, what: &str| match both(what) {
        true => format!("{command} (standard error: {command} --stderr)"),
        false => command,
    };
    match (wrote("step"), wrote("verifier")) {
        (_, true) if verifier_failed => with_stderr(format!("{command} --verifier"), "verifier"),
        (true, _) => with_stderr(command, "step"),
        (false, true) => with_stderr(format!("{command} --verifier"), "verifier"),
        (false, false) => "none: the step wrote nothing".into(),
    }
}

/// The await of a loop awaiting approval.
fn awaiting(s: &State) -> Option<&crate::state::Await> {
    s.awaiting
        .as_ref()
        .filter(|_| s.status == crate::state::Status::AwaitingApproval)
}

/// `approval since 2026-12-03 14:02:11 +01:00 (3m ago), await aw-5:
/// automaton review NAME`.
fn awaiting_words(name: &str, a: &crate::state::Await) -> String {
    format!(
        "approval since {} ({}), await {}: automaton review {name}",
        local(a.since),
        ago(a.since),
        a.id
    )
}

/// `#3 failed 2m ago, step exited 3 in 18ms`.
fn describe_last(t: &crate::state::LastTick) -> String {
    let mut text = format!("#{} {} {}", t.number, t.outcome, ago(t.ended_at));
    if let Some(step) = &t.step {
        text += &format!(", step {step}");
    }
    if let Some(v) = &t.verifier {
        text += if v.success() {
            ", verifier passed"
        } else {
            ", verifier failed"
        };
    }
    if t.outcome == Outcome::Failed && t.step.is_none() {
        text += ", step did not start";
    }
    text
}
