//! The command line, declared with clap; no logic lives here.
//! `commands::run` turns it into work.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use clap_complete::engine::ArgValueCandidates;

use crate::config::Dur;
use crate::lock::Wait;
use crate::schedule;

#[derive(Debug, Parser)]
#[command(
    name = "automaton",
    version,
    about = "Runs recurring jobs (loops) fired by schedulers, guarded by sandboxed WebAssembly gates",
    propagate_version = true,
    max_term_width = 100,
    after_help = EXAMPLES
)]
pub struct Cli {
    /// The root holding loops/ and cache/ [default: $AUTOMATON_ROOT, the
    /// nearest .automaton/ here or above, else ~/.local/share/automaton]
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Where the root's loops live: `file` (its loops/ directory), or a
    /// postgres://USER@HOST/DB URL [default: $AUTOMATON_STORE, else `store`
    /// in <root>/automaton.toml, else file]
    #[arg(long, global = true, value_name = "URL", hide_env_values = true)]
    pub store: Option<String>,

    /// More log output on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides
    #[arg(short, long, global = true, action = ArgAction::Count)]
    pub verbose: u8,

    /// Only errors on stderr
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Command,
}

const EXAMPLES: &str = "\
Examples:
  automaton init                          make ./.automaton
  automaton new nightly --step 'make test'
  automaton list --status failing         what needs a look (active, paused, invalid, ...)
  automaton status nightly                schedule, next run, last outcome, lock holder
  automaton logs nightly --stderr         the last tick's step errors (stderr)
  automaton edit nightly                  change loop.toml, checked before it is saved
  automaton approve nightly --note 'ok'   release a loop awaiting approval
  automaton daemon                        tick every scheduled loop, in the foreground

Completions: `source <(automaton completions bash)` in ~/.bashrc
(zsh, fish, elvish, powershell alike; see `automaton completions --help`).
Manual: `automaton man --dir ~/.local/share/man/man1` installs every page.";

// Each subcommand enum is `defer`red: a subcommand's arguments are declared
// only when that subcommand is parsed (or when the whole tree is built, for
// help, completions and the man page). A `tick` run by a scheduler then
// declares its own few arguments, not the ~200 of every command, and clap
// copies the global options into each subcommand without building it.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum Command {
    /// Create a root (./.automaton unless --root or $AUTOMATON_ROOT says otherwise)
    Init(InitArgs),
    /// Create a loop
    New(NewArgs),
    /// List the loops: status, schedule, next run, last outcome
    List(ListArgs),
    /// Show one loop in detail, or all of them
    Status(StatusArgs),
    /// Show a loop's events
    History(HistoryArgs),
    /// What became of each firing of a loop's schedule: ran, skipped (and
    /// why), or missed, runs of them folded with their count and window
    #[command(
        after_help = "Examples:\n  automaton fires nightly              every firing recorded\n  \
automaton fires nightly --since 1d   those of the last day\n  \
automaton fires nightly --json       as JSON records"
    )]
    Fires(FiresArgs),
    /// The budgets: their windows, what each has spent and holds reserved against its cap
    Budget(BudgetArgs),
    /// What an approver decides on: the pending await, the ticks since the
    /// last approval, their metrics, and the commits since the last approved one
    Review(ReviewArgs),
    /// Print a tick's step (or verifier) output
    #[command(
        after_help = "Examples:\n  automaton logs nightly             the last tick's step stdout\n  \
automaton logs nightly 12 --stderr  tick 12's step stderr\n  \
automaton logs nightly --follow     the running tick's output, until it ends"
    )]
    Logs(LogsArgs),
    /// Check a loop's config (or a loop.toml file) as a tick would load it
    Validate(ValidateArgs),
    /// Edit a loop's loop.toml in $VISUAL/$EDITOR; saved only if it is valid
    Edit(EditArgs),
    /// Pause a loop: ticks do nothing until it is resumed
    Pause(PauseArgs),
    /// Make a paused, halted or completed loop active again
    Resume(ResumeArgs),
    /// Approve the loop's next awaited tick
    Approve(ApproveArgs),
    /// Reject: halt the loop, recording who and why
    Reject(RejectArgs),
    /// Stop the tick in flight: TERM to its step's process group, then KILL
    Cancel(CancelArgs),
    /// Delete a loop and its history
    Rm(RmArgs),
    /// Run one tick: the gates, the step, the verifier (what a scheduler runs)
    Tick(TickArgs),
    /// Evaluate the before-step gates as the next tick would, under the lock
    CheckGate(CheckGateArgs),
    /// Test, inspect, compile, list and replay gates
    #[command(subcommand)]
    Gate(GateCommand),
    /// Install, remove or show a loop's OS schedule (systemd, launchd, cron, schtasks)
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Run the embedded scheduler in the foreground: ticks every scheduled loop
    Daemon(DaemonArgs),
    /// Serve the web console and its JSON API over HTTP(S), in the foreground
    #[command(after_help = "Examples:\n  \
automaton user add ann                      make a user; prints its token once\n  \
automaton serve                             http://127.0.0.1:8080, sign in with the token\n  \
automaton serve --listen 0.0.0.0:8443 --tls-cert cert.pem --tls-key key.pem\n  \
automaton serve --listen unix:/run/automaton/console.sock --trust-header X-Forwarded-User \
--trusted-proxy-user www-data\n  \
automaton serve --trust-header X-Forwarded-User --trusted-proxy 127.0.0.1 \
--proxy-secret-file /etc/automaton/proxy-secret")]
    Serve(ServeArgs),
    /// Add, list, remove the console's users, give one a new token, or show the admin record
    #[command(subcommand)]
    User(UserCommand),
    /// Add, remove or list the OS users who may act for the person $AUTOMATON_USER names
    #[command(subcommand)]
    Delegate(DelegateCommand),
    /// Record this host's root-wide [access] in a shared store for every host, or show it
    #[command(subcommand)]
    Access(AccessCommand),
    /// Print a shell completion script (it completes loop names too)
    #[command(after_help = "Install:\n  \
bash        echo 'source <(automaton completions bash)' >> ~/.bashrc\n  \
zsh         echo 'source <(automaton completions zsh)' >> ~/.zshrc\n  \
fish        automaton completions fish > ~/.config/fish/completions/automaton.fish\n  \
elvish      echo 'eval (automaton completions elvish | slurp)' >> ~/.config/elvish/rc.elv\n  \
powershell  automaton completions powershell | Out-String | Invoke-Expression\n\n\
The script asks `automaton` itself for completions, so it must be on PATH; loop\n\
names come from $AUTOMATON_ROOT (or --root on the line being completed).")]
    Completions(CompletionsArgs),
    /// Print the man page (roff), or a command's, generated from these definitions
    #[command(after_help = "Install every page: automaton man --dir ~/.local/share/man/man1")]
    Man(ManArgs),
    /// Check a root or a loop for damage and stale leftovers; `--fix` repairs what is safe
    Doctor(DoctorArgs),
    /// Move loops, with their state and history, between a root's directory and PostgreSQL
    #[command(
        after_help = "Examples:\n  automaton migrate --from ~/.local/share/automaton --to postgres://ann@db/automaton\n  \
automaton migrate --from postgres://ann@db/automaton --to ./.automaton nightly"
    )]
    Migrate(MigrateArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address and port to listen on (port 0: any free one; the
    /// address is printed), or `unix:PATH`: a Unix socket, made with the
    /// root's file mode (0600, or 0660 in a group's root)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080", value_parser = parse_listen)]
    pub listen: Listen,
    /// Serve HTTPS with this certificate chain (PEM)
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM)
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// A header naming the user, believed only from the proxy that
    /// --trusted-proxy, --trusted-proxy-user or --proxy-secret-file names
    #[arg(long, value_name = "HEADER", value_parser = parse_header)]
    pub trust_header: Option<String>,
    /// The address of the proxy whose --trust-header is believed (over
    /// TCP: any process of that host can send from it)
    #[arg(long, value_name = "ADDR", requires = "trust_header")]
    pub trusted_proxy: Option<std::net::IpAddr>,
    /// On a Unix socket: the OS user the proxy runs as; --trust-header is
    /// believed only from a peer of that uid
    #[arg(long, value_name = "USER", requires = "trust_header")]
    pub trusted_proxy_user: Option<String>,
    /// A file holding a secret the proxy sends in `X-Automaton-Proxy-Secret`;
    /// --trust-header is believed only with it (compared in constant time)
    #[arg(long, value_name = "FILE", requires = "trust_header")]
    pub proxy_secret_file: Option<PathBuf>,
    /// How long a browser stays signed in
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "12h")]
    pub session: Duration,
    /// The longest a request may take (an approval waits this long for the loop's lock)
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "30s")]
    pub request_timeout: Duration,
    /// After SIGTERM or SIGINT: how long requests in flight may finish
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "10s")]
    pub grace: Duration,
    /// A host name the console is reached by (repeatable); a request whose
    /// `Host` is another name is refused (an address or `localhost` is
    /// always accepted)
    #[arg(long = "allowed-host", value_name = "NAME")]
    pub allowed_hosts: Vec<String>,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum UserCommand {
    /// Add a user; prints its token, once (only its hash is kept)
    Add(UserArgs),
    /// List the users (never their tokens)
    List(UserListArgs),
    /// Remove a user; its sessions end
    Remove(UserArgs),
    /// Give a user a new token; prints it once, and the old one and its sessions end
    Rotate(UserArgs),
    /// Show the root's admin record: users added, rotated, removed, delegates changed, by whom
    Log(UserListArgs),
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum DelegateCommand {
    /// Let an OS user act for the person $AUTOMATON_USER names (an admin's act, recorded)
    Add(DelegateArgs),
    /// Stop an OS user acting for others (an admin's act, recorded)
    Remove(DelegateArgs),
    /// List the recorded delegates, and how automaton.toml's `delegates` differ
    List(UserListArgs),
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum AccessCommand {
    /// Record automaton.toml's [access] lists in the store, read by every host from now on (an admin's act, recorded)
    Import(UserListArgs),
    /// Show the root-wide access in force, and how automaton.toml's [access] differs
    Show(UserListArgs),
}

#[derive(Debug, Args)]
pub struct DelegateArgs {
    /// The OS user's name
    pub name: String,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct UserArgs {
    /// The name roles are checked against (`approvers = ["ann"]`)
    pub name: String,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct UserListArgs {
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum ScheduleCommand {
    /// Have the OS scheduler run `automaton tick` on the loop's cadence
    Install(ScheduleInstallArgs),
    /// Remove the loop's installed OS schedule
    Remove(ScheduleRemoveArgs),
    /// Show what is installed
    Show(ScheduleShowArgs),
}

#[derive(Debug, Args)]
pub struct ScheduleInstallArgs {
    #[arg(add = loop_names())]
    pub name: String,
    /// The OS scheduler [default: launchd on macOS, schtasks on Windows, else
    /// systemd when `systemctl --user` works, else cron]
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// Print the files and commands, touching nothing
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct ScheduleRemoveArgs {
    #[arg(add = loop_names())]
    pub name: String,
    /// Remove from this backend even when nothing was recorded as installed
    #[arg(long, value_enum)]
    pub backend: Option<Backend>,
    /// Print the commands, touching nothing
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct ScheduleShowArgs {
    /// One loop; every installed schedule when absent
    #[arg(add = loop_names())]
    pub name: Option<String>,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Ticks running at once, at most
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent: u16,
    /// After SIGTERM or SIGINT: how long running ticks may finish before their steps are stopped
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "30s")]
    pub grace: Duration,
    /// Say whether a daemon serves the root and how far behind it is, then exit
    /// (1 when none does)
    #[arg(long)]
    pub status: bool,
    /// Answer Prometheus's scrapes of `/metrics` on ADDR (`127.0.0.1:9187`);
    /// another host's only with automaton.toml's [metrics] token_sha256 or
    /// `anonymous = true`
    #[arg(long, value_name = "ADDR", conflicts_with = "status")]
    pub metrics: Option<String>,
    /// Run as a Windows service, started by the Service Control Manager
    /// (`sc.exe create NAME binPath= "automaton.exe --root ROOT daemon --service"`);
    /// a stop stops it as Ctrl-Break does. Windows only
    #[arg(long, conflicts_with = "status")]
    pub service: bool,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct JsonArg {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct NewArgs {
    /// The loop's name: a-z, 0-9, '.', '_' and '-', up to 64 characters
    pub name: String,
    /// Use this loop.toml
    #[arg(long, value_name = "FILE", conflicts_with = "step")]
    pub from: Option<PathBuf>,
    /// The step command, run by `sh -c` (the default loop.toml runs `true`)
    #[arg(long, value_name = "CMD")]
    pub step: Option<String>,
    #[command(flatten)]
    pub json: JsonArg,
}

/// Completes a loop name from the root's loops.
fn loop_names() -> ArgValueCandidates {
    ArgValueCandidates::new(crate::complete::loop_names)
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only loops in this status (repeat or comma-separate for several)
    #[arg(long, value_enum, value_delimiter = ',', value_name = "STATUS")]
    pub status: Vec<StatusFilter>,
    #[command(flatten)]
    pub json: JsonArg,
}

/// The OS schedulers `schedule install` and `remove` take (see
/// [`schedule::Backend`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// A systemd user timer and service
    Systemd,
    /// A launchd agent
    Launchd,
    /// A line in the user's crontab
    Cron,
    /// A Windows Task Scheduler task
    Schtasks,
}

impl From<Backend> for schedule::Backend {
    fn from(b: Backend) -> schedule::Backend {
        match b {
            Backend::Systemd => schedule::Backend::Systemd,
            Backend::Launchd => schedule::Backend::Launchd,
            Backend::Cron => schedule::Backend::Cron,
            Backend::Schtasks => schedule::Backend::Schtasks,
        }
    }
}

/// What `list --status` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusFilter {
    Active,
    Paused,
    /// Also written awaiting-approval, or awaiting
    #[value(name = "awaiting_approval", alias = "awaiting-approval", alias = "awaiting")]
    AwaitingApproval,
    Halted,
    Completed,
    /// The config no longer loads
    Invalid,
    /// The last tick failed
    Failing,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    #[arg(add = loop_names())]
    pub name: String,
    /// The tick whose output to print [default: the running tick, else the last]
    pub tick: Option<u64>,
    /// Standard error instead of standard output (shown anyway when it is
    /// all the process wrote)
    #[arg(long)]
    pub stderr: bool,
    /// The verifier's output instead of the step's
    #[arg(long)]
    pub verifier: bool,
    /// Keep printing as the tick writes, until it ends (its standard error
    /// to standard error)
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// What the tick's gates logged and printed, from its history, instead
    #[arg(long, conflicts_with_all = ["stderr", "verifier", "follow"])]
    pub gates: bool,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// A loop's name, or a loop.toml file [default: every loop]
    #[arg(add = loop_names(), value_name = "NAME|FILE")]
    pub target: Option<String>,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct EditArgs {
    #[arg(add = loop_names())]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// One loop; all of them when absent
    #[arg(add = loop_names())]
    pub name: Option<String>,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[arg(add = loop_names())]
    pub name: String,
    /// Only the last N events
    #[arg(long, short = 'n', value_name = "N")]
    pub limit: Option<usize>,
    /// Only the events from this time on (2026-12-01T09:00:00Z,
    /// "2026-12-01 09:00"), or this long ago (2h, 1d)
    #[arg(long, value_name = "WHEN", value_parser = crate::fires::parse_since)]
    pub since: Option<jiff::Timestamp>,
    /// Only the events of this kind (tick, approved, rejected, ...); may be
    /// given more than once
    #[arg(long, value_name = "KIND", value_parser = clap::builder::PossibleValuesParser::new(crate::history::KINDS))]
    pub kind: Vec<String>,
    /// Then print each new event as it is committed, until interrupted
    /// (with --json, one event a line)
    #[arg(long, short = 'f')]
    pub follow: bool,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct FiresArgs {
    #[arg(add = loop_names())]
    pub name: String,
    /// Only the firings from this time on (2026-12-01T09:00:00Z,
    /// "2026-12-01 09:00"), or this long ago (2h, 1d)
    #[arg(long, value_name = "WHEN", value_parser = crate::fires::parse_since)]
    pub since: Option<jiff::Timestamp>,
    /// Only the last N records
    #[arg(long, short = 'n', value_name = "N")]
    pub limit: Option<usize>,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct BudgetArgs {
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct ReviewArgs {
    #[arg(add = loop_names())]
    pub name: String,
    /// Show the patch from the last approved commit to HEAD, after the review
    #[arg(long)]
    pub diff: bool,
    #[command(flatten)]
    pub json: JsonArg,
}

// How long to wait for the loop's lock. (A `//` comment: a doc comment on a
// flattened struct would become the about of each command that flattens it.)
#[derive(Debug, Args, Clone, Copy)]
pub struct WaitArgs {
    /// Give up waiting for the loop's lock after DUR (exit 4)
    #[arg(long, value_name = "DUR", value_parser = parse_duration, conflicts_with = "no_wait")]
    pub timeout: Option<Duration>,
    /// Give up at once if the loop's lock is held (exit 4)
    #[arg(long)]
    pub no_wait: bool,
}

impl WaitArgs {
    pub fn wait(&self) -> Wait {
        match (self.no_wait, self.timeout) {
            (true, _) => Wait::No,
            (false, Some(d)) => Wait::For(d),
            (false, None) => Wait::Forever,
        }
    }
}

/// Where `serve` listens: a TCP address, or a Unix socket's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Tcp(std::net::SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(addr) => write!(f, "{addr}"),
            Listen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

fn parse_listen(s: &str) -> Result<Listen, String> {
    match s.strip_prefix("unix:") {
        Some("") => Err("`unix:` needs a socket's path, as in unix:/run/automaton/console.sock".to_owned()),
        Some(path) => Ok(Listen::Unix(PathBuf::from(path))),
        None => s
            .parse()
            .map(Listen::Tcp)
            .map_err(|_| "an address and port (127.0.0.1:8080), or unix:PATH".to_owned()),
    }
}

fn parse_header(s: &str) -> Result<String, String> {
    match !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        true => Ok(s.to_owned()),
        false => Err("a header name is letters, digits, '-' and '_'".to_owned()),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    Dur::parse(s).map(|d| d.0)
}

#[derive(Debug, Args)]
pub struct LoopArgs {
    #[arg(add = loop_names())]
    pub name: String,
    #[command(flatten)]
    pub wait: WaitArgs,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    pub target: LoopArgs,
    /// Why, for the record
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub target: LoopArgs,
    /// Start the loop's metric totals over, so a `budget` gate counts from
    /// zero again (the totals it drops are recorded in its history)
    #[arg(long)]
    pub reset_budget: bool,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    #[command(flatten)]
    pub target: LoopArgs,
    /// A note kept with the approval
    #[arg(long)]
    pub note: Option<String>,
    /// Approve the loop's next await, not the one pending now (a loop that
    /// is not awaiting is refused without it)
    #[arg(long, conflicts_with = "await_id")]
    pub ahead: bool,
    /// The await approved (`aw-N`, as `status` shows it): refused unless it
    /// is the one pending
    #[arg(long = "await", value_name = "ID")]
    pub await_id: Option<String>,
    /// Then run the tick the approval releases, here and now, as `tick`
    /// does (its output and exit code); not when more approvals are needed
    #[arg(long, conflicts_with_all = ["ahead", "json"])]
    pub run: bool,
}

#[derive(Debug, Args)]
pub struct RejectArgs {
    #[command(flatten)]
    pub target: LoopArgs,
    /// Why, for the record
    #[arg(long)]
    pub reason: Option<String>,
    /// The await rejected (`aw-N`): refused unless it is the one pending
    #[arg(long = "await", value_name = "ID")]
    pub await_id: Option<String>,
    /// Halt the loop even when no await is pending (without it, that is refused)
    #[arg(long)]
    pub halt: bool,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    #[arg(add = loop_names())]
    pub name: String,
    /// Why, for the record: kept with the tick it cancels
    #[arg(long)]
    pub reason: Option<String>,
    /// How long the step has after SIGTERM before SIGKILL
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "10s")]
    pub grace: Duration,
    /// Give up waiting for the tick to end (and free the lock) after DUR
    /// (exit 4) [default: 1m]
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct RmArgs {
    #[command(flatten)]
    pub target: LoopArgs,
    /// Remove it whatever its state: active, awaiting approval, or a state
    /// file that no longer reads
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Where the loops are: a root directory (its file store), or a postgres:// URL
    #[arg(long, value_name = "DIR|URL")]
    pub from: String,
    /// Where they go: a root directory, or a postgres:// URL
    #[arg(long, value_name = "DIR|URL")]
    pub to: String,
    /// The loops to move (default: every loop in --from)
    pub names: Vec<String>,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Share the root with an OS group: its directories set-group-ID and
    /// group-writable, its files group-readable and writable, so each
    /// member uses it as themselves (README, "A root shared by a group")
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The loop to check (default: every loop, and the root)
    #[arg(add = loop_names())]
    pub name: Option<String>,
    /// Repair what is safe: an unfinished commit, stray temporary files, a
    /// dead tick not yet recorded, a cache others can write, the modes of
    /// your files (in a group's root: what its members could not use)
    #[arg(long)]
    pub fix: bool,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct TickArgs {
    #[arg(add = loop_names())]
    pub name: String,
    /// With `overlap = "wait"`: give up waiting for the loop's lock after DUR (exit 4)
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// What fires this tick, as its history and ledger record it (the OS
    /// schedules `automaton schedule install` writes say which they are);
    /// without it, a person
    #[arg(long, value_name = "WHAT", value_enum)]
    pub fired_by: Option<crate::fires::FiredBy>,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct CheckGateArgs {
    #[command(flatten)]
    pub target: LoopArgs,
    /// Record the combined decision (halt, complete, await) without running the step
    #[arg(long)]
    pub apply: bool,
}

#[derive(Debug, Subcommand)]
#[command(defer = true)]
pub enum GateCommand {
    /// Evaluate a gate alone against a JSON context, or a table of cases
    ///
    /// `automaton gate context` prints a context with every field: the
    /// shape --context reads and each case of --cases carries.
    Test {
        /// A component file, or stock:NAME
        target: String,
        /// A JSON context file, or - for standard input; missing fields
        /// take defaults (`automaton gate context` shows every field)
        #[arg(long, value_name = "FILE", conflicts_with = "cases")]
        context: Option<String>,
        /// A JSON array of cases, each {"name", "context", "params",
        /// "phase", "expect"}; "expect" holds a "decision" or an "error"
        /// (trap, timeout, memory, refused, bad-params…) or a
        /// "rejected_param", and optionally "reason", "reason_matches" and
        /// "log" (regular expressions): prints one line per case with its
        /// time and `N passed, N failed`, and fails when one does
        #[arg(long, value_name = "FILE")]
        cases: Option<PathBuf>,
        /// Run each case RUNS more times and print its median and 99th
        /// percentile time
        #[arg(long, value_name = "RUNS", requires = "cases", num_args = 0..=1, default_missing_value = "100")]
        bench: Option<u32>,
        /// The gate's params, as a JSON object (overrides the context's)
        #[arg(long, value_name = "JSON", value_parser = parse_json)]
        params: Option<serde_json::Value>,
        /// The phase to evaluate in (overrides the context's)
        #[arg(long, value_parser = parse_phase)]
        phase: Option<crate::domain::Phase>,
        /// The evaluation's timeout
        #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "1s")]
        timeout: Duration,
        /// The gate's memory cap, as in loop.toml (e.g. 64MiB)
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        memory: Option<bytesize::ByteSize>,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Create a gate project: the example gate for a language, renamed, with
    /// its WIT, pinned build script and sample cases
    New {
        /// The gate's name (lower-case letters, digits, dashes)
        #[arg(value_parser = crate::gate::scaffold::parse_name)]
        name: String,
        #[arg(long, value_enum)]
        lang: crate::gate::scaffold::Lang,
        /// Where to create it [default: ./NAME]
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Print an example gate context with every field: the JSON
    /// `gate test --context` reads
    Context,
    /// Show what a gate says about itself, its imports and exports
    Inspect {
        /// A component file, or stock:NAME
        target: String,
        #[command(flatten)]
        json: JsonArg,
    },
    /// Compile components into the root's cache
    Compile {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        #[command(flatten)]
        json: JsonArg,
    },
    /// List the stock gates
    List(JsonArg),
    /// Evaluate a loop's recorded gate contexts again with another gate, and
    /// show where its decisions would differ
    ///
    /// Exits 0 when no decision would differ, 11 when one would.
    Replay(ReplayArgs),
    /// Make a shadow gate live, on its evidence: the live gate of its name
    /// becomes a shadow (or goes, with --remove)
    ///
    /// Refused unless enough of its last 50 evaluations agreed with the
    /// live gates (--min), or --force, which is recorded. Recorded in the
    /// loop's history with who promoted it and the evidence; loop.toml is
    /// edited in place, its comments kept. Operators may promote.
    Promote(PromoteArgs),
    /// Let a loop run an older signed build of a gate than the highest it
    /// ran (recorded in its history, with who allowed it)
    AllowRollback(AllowRollbackArgs),
}

#[derive(Debug, Args)]
pub struct AllowRollbackArgs {
    #[command(flatten)]
    pub target: LoopArgs,
    /// The gate's name, as its `describe` gives it (`gate inspect` shows it)
    pub gate: String,
    /// The version the loop may run from now on (and any later one)
    #[arg(value_name = "VERSION")]
    pub to: String,
}

#[derive(Debug, Args)]
pub struct PromoteArgs {
    /// The loop
    #[arg(add = loop_names())]
    pub name: String,
    /// The shadow gate, as loop.toml writes it (a component's path, or stock:NAME)
    #[arg(value_name = "GATE")]
    pub gate: String,
    /// Remove the gate it replaces instead of keeping it as a shadow
    #[arg(long)]
    pub remove: bool,
    /// Promote it without enough agreeing evaluations (recorded as forced)
    #[arg(long)]
    pub force: bool,
    /// The agreeing evaluations, of its last 50, a promotion needs
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub min: usize,
    #[command(flatten)]
    pub wait: WaitArgs,
    #[command(flatten)]
    pub json: JsonArg,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The loop whose history to replay
    #[arg(add = loop_names())]
    pub name: String,
    /// The gate to replay with: a component file, or stock:NAME
    #[arg(long, value_name = "FILE|stock:NAME")]
    pub gate: String,
    /// Params to evaluate with instead of the recorded ones (a JSON object)
    #[arg(long, value_name = "JSON", value_parser = parse_json)]
    pub params: Option<serde_json::Value>,
    /// Only the last N recorded evaluations
    #[arg(long, value_name = "N")]
    pub last: Option<usize>,
    /// Only evaluations of this gate as recorded (e.g. stock:budget)
    /// [default: the recorded gate of the same name as --gate's]
    #[arg(long, value_name = "GATE")]
    pub of: Option<String>,
    /// Only the rows whose decision or reason would differ (the summary
    /// still counts them all)
    #[arg(long)]
    pub diff_only: bool,
    /// Only the summary: the rows, those that differ, each transition,
    /// the reason-only changes and the counterfactual rows (with --json,
    /// an object of them instead of the rows)
    #[arg(long)]
    pub summary: bool,
    #[command(flatten)]
    pub json: JsonArg,
}

fn parse_json(s: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(s).map_err(|e| format!("not valid JSON: {e}"))
}

fn parse_size(s: &str) -> Result<bytesize::ByteSize, String> {
    s.parse().map_err(|e| format!("not a size (e.g. 64MiB): {e}"))
}

fn parse_phase(s: &str) -> Result<crate::domain::Phase, String> {
    match s {
        "before-step" => Ok(crate::domain::Phase::BeforeStep),
        "after-step" => Ok(crate::domain::Phase::AfterStep),
        _ => Err("expected before-step or after-step".to_owned()),
    }
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// A command whose page to print (`approve`, `gate test`) [default: automaton(1)]
    #[arg(value_name = "COMMAND")]
    pub command: Vec<String>,
    /// Write every page (automaton.1, automaton-approve.1, ...) into DIR instead
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// Parsing a command line declares the arguments of the subcommand it
    /// names and of no other: the rest of the tree costs a tick nothing.
    #[test]
    fn parsing_declares_only_the_named_subcommands_arguments() {
        let mut cmd = Cli::command();
        cmd.try_get_matches_from_mut(["automaton", "tick", "nightly"])
            .unwrap();
        let declared = |name: &str| {
            let sub = cmd.find_subcommand(name).unwrap();
            sub.get_arguments().any(|a| !a.is_global_set())
        };
        assert!(declared("tick"));
        for other in ["list", "status", "serve", "daemon", "new"] {
            assert!(!declared(other), "{other}'s arguments were declared");
        }
        let gate = cmd.find_subcommand("gate").unwrap();
        let test = gate.find_subcommand("test").unwrap();
        assert!(test.get_arguments().all(clap::Arg::is_global_set));
    }

    /// Declaring a subcommand's arguments leaves its description as it was:
    /// `pause --help` and the man page say what `automaton --help` says.
    #[test]
    fn declaring_a_subcommands_arguments_keeps_its_description() {
        fn abouts(cmd: &clap::Command, path: &str, out: &mut Vec<(String, String)>) {
            // `help` is clap's own, added when the tree is built.
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                let path = format!("{path} {}", sub.get_name());
                let about = sub
                    .get_about()
                    .map(std::string::ToString::to_string)
                    .unwrap_or_default();
                out.push((path.clone(), about));
                abouts(sub, &path, out);
            }
        }
        let (mut declared, mut built) = (Vec::new(), Vec::new());
        abouts(&Cli::command(), "automaton", &mut declared);
        let mut cmd = Cli::command();
        cmd.build();
        abouts(&cmd, "automaton", &mut built);
        assert_eq!(declared, built);
    }

    /// The whole tree, built (help, completions, the man page), still has
    /// every subcommand's arguments.
    #[test]
    fn a_built_tree_declares_every_subcommands_arguments() {
        let mut cmd = Cli::command();
        cmd.build();
        for name in ["tick", "list", "serve", "daemon", "new"] {
            let sub = cmd.find_subcommand(name).unwrap();
            assert!(sub.get_arguments().any(|a| !a.is_global_set()), "{name}");
        }
        let gate = cmd.find_subcommand("gate").unwrap();
        let test = gate.find_subcommand("test").unwrap();
        assert!(test.get_arguments().any(|a| !a.is_global_set()));
    }
}
