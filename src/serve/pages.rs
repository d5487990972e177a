//! The console's pages, rendered on the server (maud escapes every value)
//! and sized for a phone: the loops (awaiting approval first), a loop (its
//! status, actions, history), a tick's output, and the review of an await
//! with Approve and Reject. A page shows only the buttons its user's roles
//! allow; a form posted anyway is refused by the same check the command
//! line makes. Forms carry the session's CSRF token. Pages reload
//! themselves when the loop they show changes (`/assets/console.js`).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde::Deserialize;

use super::api::{self, ApiError, Change, Verb, reader};
use super::auth::{PageUser, Who};
use super::{App, blocking};
use crate::access::{self, Action};
use crate::ops::views::history::{Field, Line};
use crate::ops::views::review::{Review, TickReview};
use crate::ops::views::{self, status};
use crate::state::Status;

/// The most of one output a page shows (its end).
const OUTPUT_SHOWN: usize = 256 * 1024;
/// The most events a loop's page lists (the latest).
const EVENTS_SHOWN: usize = 50;

fn page(title: &str, who: Option<&Who>, live: Option<&str>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · automaton" }
                link rel="stylesheet" href="/assets/console.css";
                script src="/assets/console.js" defer {}
            }
            body data-live=[live] {
                header {
                    a.brand href="/" { "automaton" }
                    @if let Some(w) = who {
                        span.who { (w.actor.user) }
                        form.inline method="post" action="/signout" {
                            (csrf(w))
                            button.link type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

fn csrf(who: &Who) -> Markup {
    html! { @if let Some(t) = &who.csrf { input type="hidden" name="csrf" value=(t); } }
}

/// A page, answered with `status` (maud's answer: HTML, in UTF-8).
fn html_response(status: StatusCode, markup: Markup) -> Response {
    (status, markup).into_response()
}

/// An error as a page.
fn error_page(who: Option<&Who>, e: ApiError) -> Response {
    let body = html! {
        h1 { "Not done" }
        p.error { (e.message) }
        p { a href="/" { "Back to the loops" } }
    };
    html_response(e.status, page("Error", who, None, body))
}

/// The sign-in form; `csrf` is also in its cookie.
pub(super) fn signin(csrf: &str, error: Option<&str>) -> Response {
    let body = html! {
        h1 { "Sign in" }
        @if let Some(e) = error { p.error { (e) } }
        form.card method="post" action="/signin" {
            input type="hidden" name="csrf" value=(csrf);
            label for="token" { "Token" }
            input #token type="password" name="token" autocomplete="current-password" required autofocus;
            button type="submit" { "Sign in" }
        }
        p.hint { "Your token is printed once by " code { "automaton user add NAME" } "." }
    };
    html_response(StatusCode::OK, page("Sign in", None, None, body))
}

/// `<time datetime="2026-12-03T16:04:07Z">2026-12-03 16:04 UTC (3m
/// ago)</time>`: read well without a script, which shows it in the
/// viewer's own zone (`/assets/console.js`).
fn time(t: jiff::Timestamp) -> Markup {
    html! {
        time datetime=(t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()) title=(t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string()) {
            (t.strftime("%Y-%m-%d %H:%M UTC").to_string()) " (" (ago(t)) ")"
        }
    }
}

/// `3m ago`, `just now`, `in 5m`.
fn ago(t: jiff::Timestamp) -> String {
    let secs = crate::clock::now().duration_since(t).as_secs();
    let span = |s: i64| match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86_400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    };
    match secs {
        -4..5 => "just now".to_owned(),
        5.. => format!("{} ago", span(secs)),
        _ => format!("in {}", span(-secs)),
    }
}

/// The await of a loop awaiting approval.
fn awaiting(v: &status::LoopView) -> Option<&crate::state::Await> {
    v.state
        .awaiting
        .as_ref()
        .filter(|_| v.state.status == Status::AwaitingApproval)
}

/// `awaiting approval since 2026-12-03 14:02 UTC (3m ago)`.
fn awaiting_since(a: &crate::state::Await) -> Markup {
    html! { "awaiting approval since " (time(a.since)) }
}

fn badge(status: &str) -> Markup {
    html! { span class=(format!("badge {}", status.replace('_', "-"))) { (status.replace('_', " ")) } }
}

/// The most loops the loops page lists at once.
const LOOPS_PER_PAGE: usize = 50;

/// `GET /?status=S&q=TEXT&page=N`: which loops the loops page lists.
#[derive(Deserialize, Default)]
pub(super) struct ListQuery {
    status: Option<String>,
    q: Option<String>,
    page: Option<String>,
}

impl ListQuery {
    fn status(&self) -> Option<&str> {
        self.status.as_deref().filter(|s| !s.is_empty())
    }

    fn search(&self) -> Option<String> {
        self.q
            .as_deref()
            .map(str::trim)
            .filter(|q| !q.is_empty())
            .map(str::to_lowercase)
    }

    /// The page asked for, from 1.
    fn page(&self) -> usize {
        self.page
            .as_deref()
            .and_then(|p| p.parse().ok())
            .unwrap_or(1)
            .max(1)
    }

    /// This query's link, at page `page`.
    fn link(&self, status: Option<&str>, page: usize) -> String {
        let mut parts = Vec::new();
        if let Some(s) = status {
            parts.push(format!("status={}", encode(s)));
        }
        if let Some(q) = self.q.as_deref().filter(|q| !q.trim().is_empty()) {
            parts.push(format!("q={}", encode(q.trim())));
        }
        if page > 1 {
            parts.push(format!("page={page}"));
        }
        if parts.is_empty() {
            "/".to_owned()
        } else {
            format!("/?{}", parts.join("&"))
        }
    }
}

/// `text` as a URL's query value.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A listed loop's status as the page counts and filters it.
fn listed_status(l: &status::Listed) -> String {
    match l {
        status::Listed::Loop(v) => v.shown_status(),
        status::Listed::Unreadable { .. } => "unreadable".to_owned(),
    }
}

fn listed_name(l: &status::Listed) -> &str {
    match l {
        status::Listed::Loop(v) => &v.name,
        status::Listed::Unreadable { name, .. } => name,
    }
}

/// `GET /`: the loops the user may see, awaiting approval first: their
/// counts by status, then those the filter and search keep, a page at a
/// time; and a banner when no daemon serves the root.
pub(super) async fn list(
    State(app): State<Arc<App>>,
    PageUser(who): PageUser,
    Query(query): Query<ListQuery>,
) -> Response {
    let me = who.clone();
    let rendered = blocking(move || {
        let mut listed = views::status::list(&reader(&app, &me.actor))?.loops;
        listed.sort_by_key(|l| match l {
            status::Listed::Loop(v) => v.state.status != Status::AwaitingApproval,
            status::Listed::Unreadable { .. } => true,
        });
        let banner = no_daemon(&app);
        Ok(html! { (banner) (loops_page(&listed, &query)) })
    })
    .await;
    match rendered {
        Ok(body) => html_response(StatusCode::OK, page("Loops", Some(&who), Some("*"), body)),
        Err(e) => error_page(Some(&who), e.into()),
    }
}

/// Whether a daemon serves the root now.
fn daemon_serves(app: &App) -> bool {
    crate::daemon::daemon_status(&app.root)
        .ok()
        .flatten()
        .is_some_and(|d| d.serving)
}

/// The banner a page shows when no daemon serves the root.
fn no_daemon(app: &App) -> Markup {
    html! {
        @if !daemon_serves(app) {
            p.banner role="status" {
                "No daemon serves this root: a loop's schedule and an approval's tick wait until "
                code { "automaton daemon" } " runs (an OS schedule still fires its loop)."
            }
        }
    }
}

/// The loops page: the counts by status (each a filter), the search, the
/// loops `query` keeps, and the links to the other pages.
fn loops_page(listed: &[status::Listed], query: &ListQuery) -> Markup {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for l in listed {
        *counts.entry(listed_status(l)).or_default() += 1;
    }
    let search = query.search();
    let kept: Vec<&status::Listed> = listed
        .iter()
        .filter(|l| query.status().is_none_or(|s| listed_status(l) == s))
        .filter(|l| {
            search
                .as_ref()
                .is_none_or(|q| listed_name(l).to_lowercase().contains(q))
        })
        .collect();
    let pages = kept.len().div_ceil(LOOPS_PER_PAGE).max(1);
    let at = query.page().min(pages);
    let shown = &kept[(at - 1) * LOOPS_PER_PAGE..kept.len().min(at * LOOPS_PER_PAGE)];
    html! {
        h1 { "Loops" }
        nav.counts aria-label="By status" {
            a href=(query.link(None, 1)) class=[query.status().is_none().then_some("on")] { "all " (listed.len()) }
            @for (s, n) in &counts {
                " " a href=(query.link(Some(s), 1)) class=[(query.status() == Some(s.as_str())).then_some("on")] {
                    (s.replace('_', " ")) " " (n)
                }
            }
        }
        form.search method="get" action="/" role="search" {
            @if let Some(s) = query.status() { input type="hidden" name="status" value=(s); }
            label for="q" { "Search by name" }
            input #q type="search" name="q" value=[query.q.as_deref()] placeholder="name";
            button type="submit" { "Search" }
        }
        @if kept.is_empty() { p { "No loops to show." } }
        @else { p.hint { "Loops " ((at - 1) * LOOPS_PER_PAGE + 1) "–" ((at - 1) * LOOPS_PER_PAGE + shown.len()) " of " (kept.len()) "." } }
        (loops_table(shown))
        @if pages > 1 {
            nav.pages aria-label="Pages" {
                @if at > 1 { a rel="prev" href=(query.link(query.status(), at - 1)) { "← Previous" } }
                " Page " (at) " of " (pages) " "
                @if at < pages { a rel="next" href=(query.link(query.status(), at + 1)) { "Next →" } }
            }
        }
    }
}

fn loops_table(listed: &[&status::Listed]) -> Markup {
    html! {
        table.loops {
            thead { tr { th { "Loop" } th { "Status" } th { "Next" } th { "Last" } } }
            tbody {
                @for l in listed {
                    @match *l {
                        status::Listed::Loop(v) => tr class=(v.state.status.as_str()) {
                            td { a href=(format!("/loops/{}", v.name)) { (v.name) } }
                            td { (badge(&v.shown_status()))
                                @if v.state.status == Status::AwaitingApproval {
                                    " " a href=(format!("/loops/{}/review", v.name)) { "review" }
                                } }
                            td { @match (awaiting(v), v.next_due) {
                                (Some(a), _) => (awaiting_since(a)),
                                (None, Some(t)) => (time(t)),
                                (None, None) => "–",
                            } }
                            td { @match &v.state.last_tick {
                                Some(t) => { (t.outcome.to_string()) " · " (time(t.ended_at)) },
                                None => "never",
                            } }
                        },
                        status::Listed::Unreadable { name, error } => tr.unreadable {
                            td { (name) } td { (badge("unreadable")) } td colspan="2" { (error) }
                        },
                    }
                }
            }
        }
    }
}

/// The buttons `who` may press on loop `v` as it stands: Pause on a loop
/// that can run or awaits, Resume on one paused, halted or completed (with
/// the budget's reset when the budget gate halted it), Cancel on a running
/// tick; none the user's roles do not allow.
fn actions(app: &App, who: &Who, dir: &dyn crate::store::LoopStore, v: &status::LoopView) -> Markup {
    let rules = crate::store::access_rules(dir, app.stores.access());
    let may = |a: Action| access::check(&who.actor, a, &rules).is_ok();
    let name = dir.name().as_str();
    let status = v.state.status;
    let button = |verb: &str, label: &str, extra: Option<(&str, &str)>| {
        html! {
            form.inline method="post" action=(format!("/loops/{name}/{verb}")) {
                (csrf(who))
                @if let Some((k, val)) = extra { input type="hidden" name=(k) value=(val); }
                button type="submit" name="verb" value=(verb) { (label) }
            }
        }
    };
    let pausable = matches!(status, Status::Active | Status::AwaitingApproval);
    let resumable = matches!(status, Status::Paused | Status::Halted | Status::Completed);
    let budget = matches!(&v.stopped_by, Some((g, _, _)) if g == "stock:budget");
    html! {
        div.actions {
            @if status == Status::AwaitingApproval && may(Action::Approve) {
                a.button href=(format!("/loops/{name}/review")) { "Review" }
            }
            @if pausable && may(Action::Pause) { (button("pause", "Pause", None)) }
            @if resumable && may(Action::Resume) {
                (button("resume", "Resume", None))
                @if budget { (button("resume", "Resume and reset the budget", Some(("reset_budget", "yes")))) }
            }
            @if v.state.in_flight.is_some() && may(Action::Cancel) { (button("cancel", "Cancel tick", None)) }
        }
    }
}

/// `GET /loops/NAME`: its status, the buttons its user may press, and its
/// latest events.
pub(super) async fn one(
    State(app): State<Arc<App>>,
    PageUser(who): PageUser,
    Path(name): Path<String>,
    Query(flash): Query<Flash>,
) -> Response {
    let me = who.clone();
    let shown = name.clone();
    let rendered = blocking(move || {
        let ctx = reader(&app, &me.actor);
        let view = views::status::status(&ctx, &name)?;
        let dir = app.stores.get(&name)?;
        let history = views::history::history(&ctx, &name, Some(EVENTS_SHOWN))?;
        let events: Vec<Line> = history.events.iter().rev().map(Line::of).collect();
        let actions = actions(&app, &me, dir.as_ref(), &view);
        let serving = daemon_serves(&app);
        let (required, bind) = dir.config().map_or((1, Default::default()), |c| {
            (c.approval.required, c.approval.bind)
        });
        let so_far = Approvals::of(&view.state, required, bind, None);
        let said = flash.message(&so_far, serving);
        let banner = no_daemon(&app);
        Ok(html! { (said) (banner) (loop_body(&view, actions, &events)) })
    })
    .await;
    match rendered {
        Ok(body) => html_response(StatusCode::OK, page(&shown, Some(&who), Some(&shown), body)),
        Err(e) => error_page(Some(&who), e.into()),
    }
}

/// The message a page shows after a change it redirected from
/// (`?done=VERB`): fixed words by verb, nothing the link could make it say.
#[derive(Deserialize, Default)]
pub(super) struct Flash {
    done: Option<String>,
}

impl Flash {
    /// What the change did; after an approval, whether the await has all
    /// it needs (`so_far`) and when its tick runs (`serving`: a daemon
    /// serves the root).
    fn message(&self, so_far: &Approvals, serving: bool) -> Markup {
        let short = so_far.given.len() < so_far.required as usize;
        let said = match self.done.as_deref().and_then(Verb::parse) {
            Some(Verb::Approve) if short => {
                "Approved. It still awaits the other approvals it needs (see its review)."
            }
            Some(Verb::Approve) if serving => "Approved. The daemon serving this root starts its tick now.",
            Some(Verb::Approve) => {
                "Approved. No daemon serves this root: its tick runs when one starts, or at `automaton tick`."
            }
            Some(Verb::Reject) => "Rejected. The page shows the loop as it is now.",
            Some(Verb::Pause) => "Paused.",
            Some(Verb::Resume) => "Resumed.",
            Some(Verb::Cancel) => "The running tick was cancelled.",
            None => return html! {},
        };
        html! { p.flash role="status" { (said) } }
    }
}

fn loop_body(v: &status::LoopView, actions: Markup, events: &[Line]) -> Markup {
    let s = &v.state;
    html! {
        h1 { (v.name) " " (badge(&v.shown_status())) }
        @if let Some(d) = &v.description { p.description { (d) } }
        @if let Some(e) = &v.config_error { p.error { (e) } }
        @if v.unconfined { p.error { "Its step runs unconfined: " code { "[step] confine = \"off\"" } "." } }
        @if let Some(r) = &s.status_reason { p { "Why: " (r) } }
        @if let Some((gate, phase, tick)) = &v.stopped_by {
            dl.facts.stopped {
                dt { "Stopped by" } dd { "gate " (gate) " (" (phase.to_string()) ", tick " (tick) ")" }
                dt { "To clear" } dd { (crate::ops::views::status::clears(&v.name, gate)) }
            }
        }
        (actions)
        dl.facts {
            dt { "Tick" } dd { (s.tick) }
            dt { "Schedule" } dd { (v.schedule.as_deref().unwrap_or("none")) }
            @if awaiting(v).is_none() {
                dt { "Next due" } dd { @match v.next_due { Some(t) => (time(t)), None => "–" } }
            }
            @if let Some(t) = &s.last_tick {
                dt { "Last tick" }
                dd { a href=(format!("/loops/{}/runs/{}", v.name, t.number)) { (t.number) } " " (t.outcome.to_string()) " · " (time(t.ended_at)) }
            }
            @if let Some(f) = &s.in_flight {
                dt { "Running" } dd { a href=(format!("/loops/{}/runs/{}", v.name, f.tick)) { "tick " (f.tick) } " since " (time(f.started_at)) }
            }
            dt { "Failures in a row" } dd { (s.consecutive_failures) }
            @if let Some(a) = awaiting(v) {
                dt { "Awaiting" } dd { (awaiting_since(a)) ": " a href=(format!("/loops/{}/review", v.name)) { "review " (a.id) } }
            }
            @if let Some(h) = &v.lock { dt { "Lock" } dd { (h.describe()) } }
        }
        @if !v.budgets.is_empty() {
            h2 { "Budgets" }
            table.budgets {
                thead { tr { th { "Budget" } th { "Window" } th { "Spent" } th { "Reserved" } th { "Cap" } th { "Window ends" } } }
                tbody {
                    @for b in &v.budgets {
                        tr {
                            td { (b.name) }
                            td { (b.window) }
                            td { (format!("{:.2}", b.spent)) " " (b.metric) }
                            td { (format!("{:.2}", b.reserved)) }
                            td { (format!("{:.2}", b.cap)) }
                            td {
                                @match b.window_end_ms.and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok()) {
                                    Some(end) => (crate::clock::local(end)),
                                    None => "each tick",
                                }
                            }
                        }
                    }
                }
            }
        }
        @if !v.shadows.is_empty() {
            h2 { "Shadow gates" }
            table.shadows {
                thead { tr { th { "Gate" } th { "Agreed" } th { "Last disagreement" } } }
                tbody {
                    @for e in &v.shadows {
                        tr {
                            td { (e.gate) }
                            td { (e.agreed) " of the last " (e.evaluations) }
                            td {
                                @match &e.last_disagreement {
                                    Some(d) => {
                                        a href=(format!("/loops/{}/runs/{}", v.name, d.tick)) { "tick " (d.tick) }
                                        " (" (d.phase.to_string()) "): " (d.live_gate) " said " (d.live.name()) ", it said " (d.shadow.name())
                                    }
                                    None => "none",
                                }
                            }
                        }
                    }
                }
            }
        }
        @if !v.last_output.is_empty() {
            h2 { "Last tick's output" }
            @for (file, lines) in &v.last_output {
                p.file { (file) }
                pre.output { @for l in lines { (l) "\n" } }
            }
        }
        h2 { "History" }
        table.events {
            thead { tr { th { "When" } th { "What" } th { "Details" } } }
            tbody { @for e in events { (event_row(&v.name, e)) } }
        }
    }
}

/// One event: when, its kind (its tick linked), and what it says in short.
fn event_row(name: &str, e: &Line) -> Markup {
    let details: Vec<String> = e
        .fields
        .iter()
        .filter(|(k, _)| k != "tick")
        .map(|(k, f)| format!("{k}: {}", field(f)))
        .collect();
    html! {
        tr {
            td.when { (time(e.at)) }
            td { (e.kind)
                @if let (Some(t), "tick") = (e.tick, e.kind.as_str()) {
                    " " a href=(format!("/loops/{name}/runs/{t}")) { (t) }
                } }
            td { (details.join(" · ")) }
        }
    }
}

/// A field of an event as a page shows it.
fn field(f: &Field) -> String {
    match f {
        Field::Text(s) => s.clone(),
        Field::Number(n) => n.to_string(),
        Field::Bool(b) => b.to_string(),
        Field::Numbers(m) => m
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// `GET /loops/NAME/review`: everything `review --json --diff` says, the
/// evidence first (the await, the ticks, the commits and the patch per
/// file), then the approvals so far, and last the Approve and Reject forms
/// for an approver.
pub(super) async fn review(
    State(app): State<Arc<App>>,
    PageUser(who): PageUser,
    Path(name): Path<String>,
) -> Response {
    let me = who.clone();
    let shown = name.clone();
    let rendered = blocking(move || {
        let r = views::review::review(&reader(&app, &me.actor), &name, true)?;
        let dir = app.stores.get(&name)?;
        let defaults = app.stores.access();
        let state = dir.load()?;
        // A change to the rules is approved under the rules before it.
        let rules = match crate::rules::approvers_of_change(&state, defaults) {
            Some(before) => before,
            None => crate::store::access_rules(dir.as_ref(), defaults),
        };
        let approver = access::check(&me.actor, Action::Approve, &rules).is_ok();
        let (required, bind) = dir.config().map_or((1, Default::default()), |c| {
            (c.approval.required, c.approval.bind)
        });
        let so_far = Approvals::of(&state, required, bind, rules.approvers.clone());
        Ok(review_body(&name, &r, &so_far, approver.then_some(&me)))
    })
    .await;
    match rendered {
        Ok(body) => html_response(
            StatusCode::OK,
            page(&format!("Review {shown}"), Some(&who), Some(&shown), body),
        ),
        Err(e) => error_page(Some(&who), e.into()),
    }
}

/// The approvals the pending await has so far, how many it needs, and who
/// may give them.
struct Approvals {
    /// Who approved, when, with what note (the latest of each person).
    given: Vec<crate::domain::Approval>,
    required: u32,
    /// The approvers; `None` when anyone who may use the root is one.
    approvers: Option<Vec<String>>,
}

impl Approvals {
    /// With `bind = "commit"`, only the approvals given on the worktree
    /// the latest was given on count, as `approve` counts them.
    fn of(
        state: &crate::state::State,
        required: u32,
        bind: crate::config::Bind,
        approvers: Option<Vec<String>>,
    ) -> Approvals {
        let target = state.awaiting.as_ref().map(|a| a.id.as_str());
        let for_target = || {
            state
                .pending_approvals
                .iter()
                .filter(move |a| a.await_id.as_deref() == target)
        };
        let latest = for_target().next_back();
        let same_worktree = |a: &&crate::domain::Approval| {
            bind == crate::config::Bind::Await
                || latest.is_some_and(|l| a.head == l.head && a.snapshot == l.snapshot)
        };
        let mut given: Vec<crate::domain::Approval> = Vec::new();
        for a in for_target().filter(same_worktree) {
            given.retain(|g| g.by != a.by);
            given.push(a.clone());
        }
        Approvals {
            given,
            required,
            approvers,
        }
    }

    /// The approvers who have not approved yet.
    fn others(&self) -> Option<Vec<&str>> {
        let approvers = self.approvers.as_ref()?;
        Some(
            approvers
                .iter()
                .filter(|u| !self.given.iter().any(|g| &g.by == *u))
                .map(String::as_str)
                .collect(),
        )
    }
}

fn review_body(name: &str, r: &Review, so_far: &Approvals, approver: Option<&Who>) -> Markup {
    html! {
        h1 { "Review " a href=(format!("/loops/{name}")) { (name) } " " (badge(r.status.as_str())) }
        @match &r.awaiting {
            Some(a) => section.pending {
                h2 { "Await " (a.id) }
                p { "Since " (time(a.since)) ", before tick " (a.tick) }
                ul { @for g in &a.gates {
                    li { strong { (g.gate) } ": " (g.reason) }
                } }
                @if let Some(h) = &a.head { p { "On commit " code { (h) } } }
            },
            None => p { "No await is pending." },
        }
        h2 { "Ticks since the last approval" }
        @if r.ticks.is_empty() { p { "None." } }
        @for t in &r.ticks { (tick_review(name, t)) }
        h2 { "Metrics since the last approval / overall" }
        (metrics(r))
        h2 { "Config changes since the last approval" }
        (config_changes(r))
        @if let Some(w) = &r.work { (work(w)) }
        @if let Some(a) = &r.awaiting {
            h2 #approvals { "Approvals" }
            (approvals(so_far))
            @if let Some(w) = approver { (decide(name, &a.id, w)) }
        }
    }
}

/// The work since the last approval: its commits, its diffstat, its patch
/// per file, and what is uncommitted in the worktree.
fn work(w: &views::review::Work) -> Markup {
    html! {
        h2 { "Work on " (w.range.branch) }
        h3 { "Commits" }
        @if w.commits.is_empty() { p { "None." } }
        ul.commits { @for c in &w.commits { li { code { (c) } } } }
        pre.diffstat { (w.diffstat) }
        @if let Some(p) = &w.patch { (patch(p)) }
        @if !w.uncommitted.is_empty() {
            h3 { "Uncommitted in the worktree (part of the work)" }
            ul.uncommitted { @for d in &w.uncommitted { li { code { (d) } } } }
            @if w.uncommitted_more > 0 { p { "And " (w.uncommitted_more) " more." } }
            @if let Some(p) = &w.uncommitted_patch { (patch(p)) }
        }
    }
}

/// A patch, one collapsed section per file; where the review cut it is
/// said after the last.
fn patch(text: &str) -> Markup {
    let (files, cut) = per_file(text);
    html! {
        div.patch {
            @for (file, diff) in &files {
                details.file {
                    summary { code { (file) } " " span.hint { (diff.lines().count()) " lines" } }
                    pre.diff { (diff) }
                }
            }
            @if let Some(c) = cut { p.truncated { "The patch is truncated: " (c) } }
        }
    }
}

/// A patch split at each file's `diff --git a/X b/X` line: the file's name
/// and its part; and the line that says where the patch was cut, if it was.
fn per_file(text: &str) -> (Vec<(String, &str)>, Option<&str>) {
    let mut body = text;
    let mut cut = None;
    let trimmed = text.trim_end_matches('\n');
    let start = trimmed.rfind('\n').map_or(0, |i| i + 1);
    let last = &trimmed[start..];
    if last.starts_with("[truncated, ") || last.starts_with("[uncommitted patch cut at ") {
        body = &text[..start];
        cut = Some(last.trim_start_matches('[').trim_end_matches(']'));
    }
    let mut starts: Vec<usize> = body
        .match_indices("diff --git ")
        .map(|(i, _)| i)
        .filter(|&i| i == 0 || body.as_bytes()[i - 1] == b'\n')
        .collect();
    if starts.first() != Some(&0) {
        starts.insert(0, 0);
    }
    let mut files = Vec::new();
    for (n, &s) in starts.iter().enumerate() {
        let end = starts.get(n + 1).copied().unwrap_or(body.len());
        let part = &body[s..end];
        if part.trim().is_empty() {
            continue;
        }
        let first = part.lines().next().unwrap_or("");
        let file = first.rsplit_once(" b/").map_or(first, |(_, f)| f).to_owned();
        files.push((file, part));
    }
    (files, cut)
}

/// `1 of 2 approvals so far, by ann (3m ago); bob or cy may still approve`.
fn approvals(a: &Approvals) -> Markup {
    html! {
        p.approvals { (a.given.len()) " of " (a.required) " approvals so far"
            @if a.given.is_empty() { "." } @else { ":" } }
        @if !a.given.is_empty() {
            ul.approvals { @for g in &a.given {
                li { strong { (g.by) } " at " (time(g.at))
                    @if let Some(n) = &g.note { ": " (n) } }
            } }
        }
        @match a.others() {
            Some(o) if o.is_empty() => p.hint { "No other approver remains." },
            Some(o) => p.hint { "May still approve: " (o.join(", ")) "." },
            None => p.hint { "Anyone who may use the root may approve." },
        }
    }
}

fn decide(name: &str, await_id: &str, who: &Who) -> Markup {
    html! {
        div.decide {
            form.card method="post" action=(format!("/loops/{name}/approve")) {
                (csrf(who))
                input type="hidden" name="await" value=(await_id);
                label for="note" { "Note" }
                textarea #note name="note" rows="2" {}
                button.approve type="submit" { "Approve" }
            }
            form.card method="post" action=(format!("/loops/{name}/reject")) {
                (csrf(who))
                input type="hidden" name="await" value=(await_id);
                label for="reason" { "Reason (required)" }
                textarea #reason name="reason" rows="2" required {}
                button.reject type="submit" { "Reject…" }
            }
        }
    }
}

fn tick_review(name: &str, t: &TickReview) -> Markup {
    let unconfined = matches!(t.confinement, Some(crate::step::confine::Confinement::Unconfined));
    html! {
        details.tick open {
            summary {
                a href=(format!("/loops/{name}/runs/{}", t.tick)) { "tick " (t.tick) } ": " (t.outcome.to_string())
                @if unconfined { " (unconfined)" }
            }
            @if let Some(r) = &t.reason { p { "Reason: " (r) } }
            @for g in &t.gates {
                p { "Gate " strong { (g.gate) } ": " (g.decision.name()) " " (g.decision.reason()) }
            }
            @for (file, lines) in &t.output {
                p.file { (file) }
                pre { @for l in lines { (l) "\n" } }
            }
        }
    }
}

/// The changes to the rules since the last approval: a change not yet
/// recorded, then each recorded one (how, who, when, the rules it touches,
/// loop.toml's diff).
fn config_changes(r: &Review) -> Markup {
    use crate::rules::Via;
    html! {
        @if let Some(u) = &r.unrecorded_config {
            p.pending { (views::review::UNRECORDED) ": loop.toml " code { (u.loop_toml) } }
        }
        @if r.config_changes.is_empty() && r.unrecorded_config.is_none() { p { "None." } }
        @for c in &r.config_changes {
            details.config open {
                summary {
                    (time(c.at)) ": "
                    @match c.change.via { Via::Edit => "edited by ", Via::Promote => "a gate promoted by ", Via::Outside => "changed outside automaton, found by " }
                    strong { (c.actor.as_deref().unwrap_or("")) }
                    @if c.change.awaits { " (awaits approval)" }
                }
                p { "Rules: " @if c.change.rules.is_empty() { "none" }
                    @for (i, rule) in c.change.rules.iter().enumerate() {
                        @if i > 0 { ", " } code { (rule.key()) }
                    }
                }
                p { "loop.toml " code { (c.change.before.loop_toml) } " → " code { (c.change.after.loop_toml) } }
                p { "automaton.toml " code { (c.change.before.automaton_toml.as_str()) } " → " code { (c.change.after.automaton_toml.as_str()) } }
                pre.diff { (c.change.diff) }
            }
        }
    }
}

fn metrics(r: &Review) -> Markup {
    let keys: std::collections::BTreeSet<&String> = r.metrics_since.keys().chain(r.totals.keys()).collect();
    let shown = |m: &std::collections::BTreeMap<String, f64>, k: &String| {
        m.get(k)
            .map_or_else(|| "0".to_owned(), std::string::ToString::to_string)
    };
    html! {
        @if keys.is_empty() { p { "None." } }
        @else {
            table.metrics { @for k in keys {
                tr { td { (k) } td { (shown(&r.metrics_since, k)) } td { (shown(&r.totals, k)) } }
            } }
        }
    }
}

/// `GET /loops/NAME/runs/N`: the tick's step output, standard output and
/// standard error, as `logs` prints them, with when it started, how long
/// it ran and how it ended; while it runs, a Cancel button, and the
/// script appends the output as it grows (`/output`). A tick the loop
/// never reached is not found.
pub(super) async fn run(
    State(app): State<Arc<App>>,
    PageUser(who): PageUser,
    Path((name, tick)): Path<(String, String)>,
) -> Response {
    let Ok(tick) = tick.parse::<u64>() else {
        return error_page(
            Some(&who),
            ApiError::new(StatusCode::NOT_FOUND, "no_such_tick", "a tick is a number"),
        );
    };
    let me = who.clone();
    let shown = name.clone();
    let rendered = blocking(move || {
        api::may_view(&app, &me.actor, &name)?;
        let dir = app.stores.get(&name)?;
        let state = dir.load()?;
        let running = state.in_flight.as_ref().filter(|f| f.tick == tick).cloned();
        if running.is_none() && (tick == 0 || tick > state.tick) {
            return Ok(None);
        }
        let rules = crate::store::access_rules(dir.as_ref(), app.stores.access());
        let may_cancel = running.is_some() && access::check(&me.actor, Action::Cancel, &rules).is_ok();
        let out = |stderr| {
            let req = views::logs::Request {
                tick: Some(tick),
                verifier: false,
                stderr,
            };
            match views::logs::logs(&reader(&app, &me.actor), &name, req) {
                Ok(o) if o.stderr_instead => (String::new(), 0),
                Ok(o) => {
                    let bytes = usize::try_from(o.bytes).unwrap_or(usize::MAX);
                    (tail(o), bytes)
                }
                Err(e) => (format!("({})", crate::error::with_causes(&e)), 0),
            }
        };
        let last = state.last_tick.filter(|t| t.number == tick);
        Ok(Some((out(false), out(true), running, last, may_cancel)))
    })
    .await;
    let (stdout, stderr, running, last, may_cancel) = match rendered {
        Ok(Some(r)) => r,
        Ok(None) => {
            let e = ApiError::new(
                StatusCode::NOT_FOUND,
                "no_such_tick",
                &format!("loop {shown} has no tick {tick}"),
            );
            return error_page(Some(&who), e);
        }
        Err(e) => return error_page(Some(&who), e.into()),
    };
    let output = |id: &str, (text, len): &(String, usize)| {
        html! { pre.output id=(id) data-stream=(id) data-offset=(len) aria-live="off" { (text) } }
    };
    let body = html! {
        h1 { a href=(format!("/loops/{shown}")) { (shown) } " tick " (tick) @if running.is_some() { " " (badge("running")) } }
        dl.facts.run {
            @if let Some(f) = &running {
                dt { "Started" } dd { (time(f.started_at)) }
                dt { "Running for" } dd #elapsed data-since=(f.started_at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()) { (elapsed(f.started_at, crate::clock::now())) }
            }
            @if let Some(t) = &last {
                dt { "Started" } dd { (time(t.started_at)) }
                dt { "Ran for" } dd { (elapsed(t.started_at, t.ended_at)) }
                dt { "Outcome" } dd { (t.outcome.to_string()) }
                @if let Some(c) = &t.cancelled {
                    dt { "Cancelled by" } dd { (c.by) }
                    @if let Some(r) = &c.reason { dt { "Why" } dd { (r) } }
                }
                @if let Some(p) = &t.step {
                    dt { "Exit" } dd { @match (p.exit_code, p.signal) {
                        (Some(c), _) => { "exit code " (c) },
                        (None, Some(sig)) => { "ended by signal " (sig) },
                        (None, None) => "–",
                    } @if p.timed_out { " (timed out)" } }
                }
            }
        }
        @if may_cancel {
            div.actions {
                form.inline method="post" action=(format!("/loops/{shown}/cancel")) {
                    (csrf(&who))
                    button type="submit" { "Cancel tick" }
                }
            }
        }
        h2 { "Standard output" } (output("stdout", &stdout))
        h2 { "Standard error" } (output("stderr", &stderr))
    };
    let live = if running.is_some() {
        "running"
    } else {
        shown.as_str()
    };
    html_response(
        StatusCode::OK,
        page(&format!("{shown} tick {tick}"), Some(&who), Some(live), body),
    )
}

/// The end of an output, as text (never the whole file in memory).
fn tail(output: views::logs::Output) -> String {
    match output.last(OUTPUT_SHOWN as u64) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => format!("({})", crate::error::with_causes(&e)),
    }
}

/// `1h 2m 3s` from `from` to `to`.
fn elapsed(from: jiff::Timestamp, to: jiff::Timestamp) -> String {
    let secs = to.duration_since(from).as_secs().max(0);
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m {}s", secs / 60, secs % 60),
        _ => format!("{}h {}m {}s", secs / 3600, secs / 60 % 60, secs % 60),
    }
}

/// `GET /loops/NAME/runs/N/output?stream=stdout|stderr&from=OFFSET`.
#[derive(Deserialize)]
pub(super) struct OutputQuery {
    stream: Option<String>,
    from: Option<u64>,
}

/// The most bytes one `/output` answer carries.
const OUTPUT_CHUNK: u64 = 256 * 1024;

/// `GET /loops/NAME/runs/N/output`: a tick's step output from byte `from`
/// on (at most 256 KiB), as text; `x-next-offset` says where the next
/// read starts, `x-running` whether the tick still runs. What a running
/// tick's page fetches every 2 s instead of reloading itself.
pub(super) async fn output(
    State(app): State<Arc<App>>,
    PageUser(who): PageUser,
    Path((name, tick)): Path<(String, u64)>,
    Query(q): Query<OutputQuery>,
) -> Response {
    let stderr = match q.stream.as_deref() {
        Some("stdout") | None => false,
        Some("stderr") => true,
        Some(_) => return (StatusCode::BAD_REQUEST, "stream is stdout or stderr\n").into_response(),
    };
    let from = q.from.unwrap_or(0);
    let me = who.clone();
    let read = blocking(move || {
        api::may_view(&app, &me.actor, &name)?;
        let dir = app.stores.get(&name)?;
        let running = dir.load()?.in_flight.is_some_and(|f| f.tick == tick);
        Ok((read_from(dir.as_ref(), tick, stderr, from), running))
    })
    .await;
    match read {
        Ok((Some((bytes, next)), running)) => (
            [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()),
                (header::CACHE_CONTROL, "no-store".to_owned()),
                (header::HeaderName::from_static("x-next-offset"), next.to_string()),
                (
                    header::HeaderName::from_static("x-running"),
                    u8::from(running).to_string(),
                ),
            ],
            bytes,
        )
            .into_response(),
        Ok((None, _)) => (StatusCode::NOT_FOUND, "no such output\n").into_response(),
        Err(e) => api_error_text(e.into()),
    }
}

fn api_error_text(e: ApiError) -> Response {
    (e.status, format!("{}\n", e.message)).into_response()
}

/// Tick `tick`'s step output from byte `from`, at most [`OUTPUT_CHUNK`]
/// bytes, cut back to a whole character; the bytes and where the next read
/// starts. `None` when the tick kept no output on this host.
fn read_from(
    dir: &dyn crate::store::LoopStore,
    tick: u64,
    stderr: bool,
    from: u64,
) -> Option<(Vec<u8>, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let run = crate::runs::Runs::open(dir.base_dir()).ok()??.run(tick).ok()??;
    let Some((mut file, len)) = run.open_read(crate::runs::output_name("step", stderr)).ok()? else {
        return Some((Vec::new(), 0));
    };
    let from = from.min(len);
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(from)).ok()?;
    file.take(OUTPUT_CHUNK).read_to_end(&mut bytes).ok()?;
    let whole = match std::str::from_utf8(&bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => bytes.len(),
    };
    bytes.truncate(whole);
    Some((bytes.clone(), from + bytes.len() as u64))
}

#[derive(Deserialize)]
pub(super) struct ChangeForm {
    csrf: Option<String>,
    note: Option<String>,
    reason: Option<String>,
    #[serde(rename = "await")]
    await_id: Option<String>,
    /// `yes` on a confirmation's form: Reject and Cancel are done only so.
    confirm: Option<String>,
    /// `yes`: Resume starts the totals over (`resume --reset-budget`).
    reset_budget: Option<String>,
}

/// `POST /loops/NAME/VERB`: a button pressed; back to the loop's page.
pub(super) async fn change(
    State(app): State<Arc<App>>,
    PageUser(who): PageUser,
    Path((name, verb)): Path<(String, String)>,
    form: Result<axum::Form<ChangeForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Some(verb) = Verb::parse(&verb) else {
        return error_page(
            Some(&who),
            ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such page"),
        );
    };
    let form = match form {
        Ok(axum::Form(f)) => f,
        Err(e) => {
            return error_page(
                Some(&who),
                ApiError::new(e.status(), "invalid_body", &e.body_text()),
            );
        }
    };
    if !who.csrf_ok(form.csrf.as_deref()) {
        let e = ApiError::new(
            StatusCode::FORBIDDEN,
            "csrf",
            "the form's CSRF token is missing or wrong; reload the page",
        );
        return error_page(Some(&who), e);
    }
    let text = |t: Option<String>| t.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty());
    let confirmed = form.confirm.as_deref() == Some("yes");
    let change = Change {
        note: text(form.note).filter(|_| verb == Verb::Approve),
        reason: text(form.reason).filter(|_| matches!(verb, Verb::Reject | Verb::Pause | Verb::Cancel)),
        await_id: text(form.await_id).filter(|_| matches!(verb, Verb::Approve | Verb::Reject)),
        reset_budget: (verb == Verb::Resume && form.reset_budget.as_deref() == Some("yes")).then_some(true),
    };
    if verb == Verb::Reject && change.reason.is_none() {
        let e = ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "reason_required",
            "a rejection needs a reason; go back and give one",
        );
        return error_page(Some(&who), e);
    }
    // A cancel's reason is asked on its confirmation.
    if verb == Verb::Cancel && confirmed && change.reason.is_none() {
        let e = ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "reason_required",
            "a cancellation needs a reason; go back and give one",
        );
        return error_page(Some(&who), e);
    }
    if matches!(verb, Verb::Reject | Verb::Cancel) && !confirmed {
        return confirm_page(&who, &name, verb, &change);
    }
    let target = name.clone();
    let actor = who.actor.clone();
    match blocking(move || api::apply(&app, actor, verb, &target, change)).await {
        Ok(_) => Redirect::to(&format!("/loops/{name}?done={}", verb_word(verb))).into_response(),
        Err(e) => error_page(Some(&who), e.into()),
    }
}

fn verb_word(verb: Verb) -> &'static str {
    match verb {
        Verb::Approve => "approve",
        Verb::Reject => "reject",
        Verb::Pause => "pause",
        Verb::Resume => "resume",
        Verb::Cancel => "cancel",
    }
}

/// The second step of Reject and Cancel: what is about to happen, and a
/// form that does it (`confirm=yes`) or a link back; no script needed.
/// Reject's reason was given on the review page; Cancel's is asked here.
fn confirm_page(who: &Who, name: &str, verb: Verb, change: &Change) -> Response {
    let (title, what, yes, back) = match verb {
        Verb::Reject => (
            "Reject?",
            format!(
                "Reject {} of loop {name}: its approvals so far are dropped.",
                change.await_id.as_deref().unwrap_or("the pending await")
            ),
            "Yes, reject",
            format!("/loops/{name}/review"),
        ),
        _ => (
            "Cancel the running tick?",
            format!("Cancel the running tick of loop {name}: its step is stopped."),
            "Yes, cancel the tick",
            format!("/loops/{name}"),
        ),
    };
    let body = html! {
        h1 { (title) }
        p { (what) }
        @if verb == Verb::Reject { @if let Some(r) = &change.reason { p { "Reason: " (r) } } }
        form.card method="post" action=(format!("/loops/{name}/{}", verb_word(verb))) {
            (csrf(who))
            input type="hidden" name="confirm" value="yes";
            @if verb == Verb::Cancel {
                label for="reason" { "Why (kept with the tick)" }
                textarea #reason name="reason" rows="2" required { (change.reason.as_deref().unwrap_or_default()) }
            } @else if let Some(r) = &change.reason { input type="hidden" name="reason" value=(r); }
            @if let Some(a) = &change.await_id { input type="hidden" name="await" value=(a); }
            button.reject type="submit" { (yes) }
        }
        p { a href=(back) { "No, go back" } }
    };
    html_response(StatusCode::OK, page(title, Some(who), None, body))
}

/// `GET /assets/FILE`: the console's own script and style.
pub(super) async fn asset(Path(file): Path<String>) -> Response {
    let (kind, text) = match file.as_str() {
        "console.js" => (
            "text/javascript; charset=utf-8",
            include_str!("assets/console.js"),
        ),
        "console.css" => ("text/css; charset=utf-8", include_str!("assets/console.css")),
        _ => return (StatusCode::NOT_FOUND, "not found\n").into_response(),
    };
    let cache = "public, max-age=3600";
    (
        [(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, cache)],
        PreEscaped(text).into_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use crate::ops::views::review::{Review, Work};
    use crate::state::Status;

    #[test]
    fn with_bind_commit_the_approvals_so_far_are_those_on_the_latest_worktree() {
        let now = crate::clock::now();
        let mut state = crate::state::State::new(now);
        state.awaiting = Some(crate::state::Await {
            id: "aw-3".into(),
            since: now,
            tick: 2,
            gates: Vec::new(),
            head: Some("h1".into()),
            snapshot: Some("s1".into()),
        });
        let approval = |by: &str, snapshot: &str| crate::domain::Approval {
            id: format!("ap-{by}"),
            by: by.into(),
            at: now,
            note: None,
            await_id: Some("aw-3".into()),
            head: Some("h1".into()),
            snapshot: Some(snapshot.into()),
        };
        // ann approved, then the worktree changed and bob approved it.
        state.pending_approvals = vec![approval("ann", "s1"), approval("bob", "s2")];
        let by = |bind| {
            let a = super::Approvals::of(&state, 2, bind, None);
            a.given.iter().map(|g| g.by.clone()).collect::<Vec<_>>()
        };
        assert_eq!(by(crate::config::Bind::Commit), ["bob"]);
        assert_eq!(by(crate::config::Bind::Await), ["ann", "bob"]);
    }

    #[test]
    fn a_time_reads_in_utc_with_its_age_and_carries_its_instant_for_the_script() {
        let t: jiff::Timestamp = "2026-12-03T16:04:07.923975625Z".parse().unwrap();
        let html = super::time(t).into_string();
        assert!(
            html.starts_with("<time datetime=\"2026-12-03T16:04:07Z\"")
                && html.contains(">2026-12-03 16:04 UTC (")
                && !html.contains(".923"),
            "{html}"
        );
        let now = crate::clock::now();
        let ten_minutes = jiff::SignedDuration::from_secs(630);
        assert_eq!(super::ago(now.checked_sub(ten_minutes).unwrap()), "10m ago");
        assert_eq!(super::ago(now.checked_add(ten_minutes).unwrap()), "in 10m");
    }

    #[test]
    fn a_patch_is_split_per_file_and_its_cut_is_said() {
        let patch = "diff --git a/src/a.rs b/src/a.rs\n+a\ndiff --git a/b.txt b/b.txt\n+b\n[truncated, 42 bytes more]\n";
        let (files, cut) = super::per_file(patch);
        let names: Vec<&str> = files.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(names, ["src/a.rs", "b.txt"]);
        assert_eq!(files[1].1, "diff --git a/b.txt b/b.txt\n+b\n");
        assert_eq!(cut, Some("truncated, 42 bytes more"));
        let html = super::patch(patch).into_string();
        assert_eq!(html.matches("<details class=\"file\">").count(), 2, "{html}");
        assert!(
            html.contains("The patch is truncated: truncated, 42 bytes more"),
            "{html}"
        );
        assert_eq!(super::per_file("diff --git a/x b/x\n+x\n").1, None);
    }

    #[test]
    fn the_review_page_lists_what_is_uncommitted_in_the_worktree() {
        let mut range = crate::since::Range::default();
        range.branch = "loop/x".into();
        let r = Review {
            loop_name: "x".into(),
            status: Status::AwaitingApproval,
            awaiting: None,
            since_version: None,
            rejected: None,
            ticks: Vec::new(),
            metrics_since: Default::default(),
            totals: Default::default(),
            work: Some(Work {
                range,
                commits: Vec::new(),
                diffstat: String::new(),
                patch: None,
                uncommitted: vec![" M a.txt".into(), "?? new.sh".into()],
                uncommitted_more: 3,
                uncommitted_patch: None,
            }),
            config_changes: Vec::new(),
            unrecorded_config: None,
            link: None,
        };
        let none = super::Approvals {
            given: Vec::new(),
            required: 1,
            approvers: None,
        };
        let html = super::review_body("x", &r, &none, None).into_string();
        assert!(html.contains("Uncommitted in the worktree"), "{html}");
        assert!(
            html.contains("?? new.sh") && html.contains("And 3 more."),
            "{html}"
        );
    }
}
