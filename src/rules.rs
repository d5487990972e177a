//! The record of the rules a loop runs under (docs/ticks.md, "The record of
//! config changes"): the sha256 of its loop.toml and of the root's
//! automaton.toml, what the state keeps of the config it last recorded, and
//! a change found since: its bounded diff, the rules it touches and whether
//! it awaits an approval. Pure, but for reading automaton.toml.

use std::collections::BTreeMap;
use std::path::Path;

use jiff::Timestamp;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::config::{ConfigChanges, LoopConfig};
use crate::state::State;

/// The most bytes of a diff an event keeps; the rest is counted.
pub(crate) const DIFF_MAX: usize = 8 * 1024;
/// The largest automaton.toml hashed (the root reads no larger).
pub(crate) const ROOT_MAX: u64 = 1024 * 1024;
/// The most hosts whose automaton.toml a loop's record keeps.
const MAX_HOSTS: usize = 64;
/// What an await for a config change names as the gate that asked.
pub(crate) const AWAIT_GATE: &str = "loop.toml";

/// A config's text and its sha256.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Source {
    pub sha256: String,
    pub text: String,
}

impl Source {
    pub fn of(text: &str) -> Source {
        Source {
            sha256: sha256(text.as_bytes()),
            text: text.to_owned(),
        }
    }
}

/// Lower-case hex sha256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// The root's automaton.toml: its sha256, or that there is none
/// (serialised as the hex digest, or `"absent"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootFile {
    Absent,
    Sha256(String),
}

impl RootFile {
    /// The file under `root`, hashed; one that cannot be read is hashed as
    /// the error that says so, so it differs from any text.
    pub fn read(root: &Path) -> RootFile {
        let path = root.join(crate::root::ROOT_CONFIG);
        match crate::fsx::read_regular(&path, ROOT_MAX) {
            Ok(Some(bytes)) => RootFile::Sha256(sha256(&bytes)),
            Ok(None) => RootFile::Absent,
            Err(e) => RootFile::Sha256(sha256(format!("unreadable: {e}").as_bytes())),
        }
    }

    /// Its digest, or `absent`, as the record has it.
    pub fn as_str(&self) -> &str {
        match self {
            RootFile::Absent => "absent",
            RootFile::Sha256(hex) => hex,
        }
    }
}

impl Serialize for RootFile {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RootFile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(if s == "absent" {
            RootFile::Absent
        } else {
            RootFile::Sha256(s)
        })
    }
}

/// The sha256 of the two files a command ran with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hashes {
    pub loop_toml: String,
    pub automaton_toml: RootFile,
}

/// The config a command runs with: its files' hashes, loop.toml's text,
/// and the host whose root's automaton.toml it read.
#[derive(Debug, Clone, PartialEq)]
pub struct Current {
    pub hashes: Hashes,
    pub text: String,
    pub host: String,
}

impl Current {
    /// loop.toml's `text`, with the root's automaton.toml as it is now.
    pub fn read(root: &Path, text: &str) -> Current {
        let source = Source::of(text);
        Current {
            hashes: Hashes {
                loop_toml: source.sha256,
                automaton_toml: RootFile::read(root),
            },
            text: source.text,
            host: crate::who::host(),
        }
    }

    /// `config` as it was read, with the root's automaton.toml as it is now.
    pub fn of(root: &Path, config: &LoopConfig) -> Current {
        Current {
            hashes: Hashes {
                loop_toml: config.source.sha256.clone(),
                automaton_toml: RootFile::read(root),
            },
            text: config.source.text.clone(),
            host: crate::who::host(),
        }
    }

    /// Whether it differs from what `state` recorded (a loop that recorded
    /// none has nothing to differ from).
    pub fn unrecorded(&self, state: &State) -> bool {
        state
            .recorded_config
            .as_ref()
            .and_then(|r| r.on(&self.host))
            .is_some_and(|before| before != self.hashes)
    }
}

/// What the state keeps of the config last recorded: the next change is
/// told against it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    pub loop_toml: String,
    /// Each host's automaton.toml as last recorded there: a shared
    /// store's loop is run from a root on each host, each with its own.
    pub automaton_toml: BTreeMap<String, RootFile>,
    /// loop.toml's text, for the next change's diff.
    pub text: String,
    /// A change to the rules that awaits an approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unapproved: Option<Unapproved>,
}

impl Recorded {
    fn new(now: &Current) -> Recorded {
        Recorded {
            loop_toml: now.hashes.loop_toml.clone(),
            automaton_toml: BTreeMap::from([(now.host.clone(), now.hashes.automaton_toml.clone())]),
            text: now.text.clone(),
            unapproved: None,
        }
    }

    /// The hashes last recorded on `host`; none when it recorded none.
    fn on(&self, host: &str) -> Option<Hashes> {
        Some(Hashes {
            loop_toml: self.loop_toml.clone(),
            automaton_toml: self.automaton_toml.get(host)?.clone(),
        })
    }

    /// Keeps `now` as the config last recorded (a host past the first
    /// [`MAX_HOSTS`] keeps no automaton.toml of its own).
    fn keep(&mut self, now: &Current) {
        self.loop_toml = now.hashes.loop_toml.clone();
        self.text = now.text.clone();
        if self.automaton_toml.len() < MAX_HOSTS || self.automaton_toml.contains_key(&now.host) {
            let root = now.hashes.automaton_toml.clone();
            self.automaton_toml.insert(now.host.clone(), root);
        }
    }
}

/// A change to the rules the loop awaits an approval of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unapproved {
    pub rules: Vec<Rule>,
    pub since: Timestamp,
    /// The await opened for it, once a tick opened one.
    #[serde(rename = "await", default, skip_serializing_if = "Option::is_none")]
    pub await_id: Option<String>,
    /// The loop's own approvers under the rules it changes (none: the
    /// root's, or anyone): they approve it, not those it names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvers_before: Option<Vec<String>>,
}

impl Unapproved {
    /// The await's reason: what changed.
    pub fn reason(&self, loop_toml: &str) -> String {
        format!(
            "the rules changed ({}; loop.toml {}): a change to the rules needs an approval",
            names(&self.rules),
            short(loop_toml)
        )
    }
}

/// A part of the config that counts as the rules: a change to it may need
/// an approval (`[approval] config_changes = "await"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Rule {
    #[serde(rename = "gate")]
    Gates,
    #[serde(rename = "access")]
    Access,
    #[serde(rename = "approval")]
    Approval,
    /// The `[step]` table (the step's confinement).
    #[serde(rename = "step")]
    Step,
    #[serde(rename = "pass_env")]
    PassEnv,
    /// How much history is kept: the record itself.
    #[serde(rename = "history")]
    History,
    /// The root's automaton.toml (delegates, the roles every loop falls
    /// back to).
    #[serde(rename = "automaton.toml")]
    RootConfig,
}

impl Rule {
    pub fn key(self) -> &'static str {
        match self {
            Rule::Gates => "gate",
            Rule::Access => "access",
            Rule::Approval => "approval",
            Rule::Step => "step",
            Rule::PassEnv => "pass_env",
            Rule::History => "history",
            Rule::RootConfig => "automaton.toml",
        }
    }
}

/// The rules, as a list a reason says.
pub fn names(rules: &[Rule]) -> String {
    rules.iter().map(|r| r.key()).collect::<Vec<_>>().join(", ")
}

/// How a change came to be recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Via {
    /// `automaton edit`.
    Edit,
    /// `automaton gate promote`.
    Promote,
    /// Written outside automaton, and found by a command that commits.
    Outside,
}

/// A change to the config: the `config-changed` event's fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigChange {
    pub via: Via,
    /// Who made it, when automaton made it (`edit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    pub before: Hashes,
    pub after: Hashes,
    /// loop.toml's unified diff, at most [`DIFF_MAX`] bytes and a line
    /// counting the rest; empty when only automaton.toml changed.
    #[serde(default)]
    pub diff: String,
    /// The rules it changes; empty for a harmless change.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Whether the loop awaits an approval of it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaits: bool,
}

/// Compares `now` with what `state` recorded and records `now` in it: the
/// change, when there is one, with a change to the rules left awaiting an
/// approval under `policy`. A loop that recorded nothing yet records `now`
/// as it is, and no change.
pub(crate) fn take_in(
    state: &mut State,
    now: &Current,
    policy: ConfigChanges,
    via: Via,
    by: Option<String>,
) -> Option<ConfigChange> {
    let Some(recorded) = &mut state.recorded_config else {
        state.recorded_config = Some(Recorded::new(now));
        return None;
    };
    // A host new to the loop records its automaton.toml as it is.
    let before = recorded.on(&now.host).unwrap_or_else(|| Hashes {
        loop_toml: recorded.loop_toml.clone(),
        automaton_toml: now.hashes.automaton_toml.clone(),
    });
    if before == now.hashes {
        recorded.keep(now);
        return None;
    }
    let rules = touched(&recorded.text, &before, now);
    // The setting as it was counts too: a change that turns it off is
    // itself awaited.
    let awaited = policy == ConfigChanges::Await || awaits_changes(&recorded.text);
    let awaits = awaited && !rules.is_empty();
    let change = ConfigChange {
        via,
        by,
        before,
        after: now.hashes.clone(),
        diff: diff(&recorded.text, &now.text),
        rules: rules.clone(),
        awaits,
    };
    if awaits {
        // Rules still awaiting an approval stay in the next approval's
        // reason, with the approvers before the first of them; the change
        // asks for a new await.
        let (mut all, approvers_before) = match recorded.unapproved.take() {
            Some(u) => (u.rules, u.approvers_before),
            None => (Vec::new(), approvers_of(&recorded.text)),
        };
        all.extend(rules);
        all.sort();
        all.dedup();
        recorded.unapproved = Some(Unapproved {
            rules: all,
            since: crate::clock::now(),
            await_id: None,
            approvers_before,
        });
    }
    recorded.keep(now);
    Some(change)
}

/// The rules that differ between the recorded config (`text`, and
/// `hashes`) and `now`.
fn touched(text: &str, hashes: &Hashes, now: &Current) -> Vec<Rule> {
    let before = table(text);
    let after = table(&now.text);
    let mut rules: Vec<Rule> = [
        Rule::Gates,
        Rule::Access,
        Rule::Approval,
        Rule::PassEnv,
        Rule::History,
    ]
    .into_iter()
    .filter(|r| before.get(r.key()) != after.get(r.key()))
    .collect();
    // `[gates]` (signatures required, by how many) is part of the gates' rules.
    if before.get("gates") != after.get("gates") && !rules.contains(&Rule::Gates) {
        rules.insert(0, Rule::Gates);
    }
    // The `[step]` table's confinement, not its command: `step = "..."`
    // and a table with only `command` confine alike.
    let confinement = |t: &toml::Table| {
        let mut table = t
            .get("step")
            .and_then(|v| v.as_table())
            .cloned()
            .unwrap_or_default();
        table.remove("command");
        table
    };
    if confinement(&before) != confinement(&after) {
        rules.push(Rule::Step);
    }
    if hashes.automaton_toml != now.hashes.automaton_toml {
        rules.push(Rule::RootConfig);
    }
    rules.sort();
    rules
}

/// Whether a change to the rules of a loop configured as `config`, whose
/// state is `state`, would await an approval (the setting as it is, or as
/// last recorded).
pub(crate) fn may_await(config: &LoopConfig, state: &State) -> bool {
    config.approval.config_changes == ConfigChanges::Await
        || state
            .recorded_config
            .as_ref()
            .is_some_and(|r| awaits_changes(&r.text))
}

/// The loop's own approvers in loop.toml's `text`.
fn approvers_of(text: &str) -> Option<Vec<String>> {
    let config = LoopConfig::parse(text, Path::new(AWAIT_GATE)).ok()?;
    config.access().approvers
}

/// Who may approve a change to the rules that awaits an approval: the
/// approvers under the rules it changed (their own, else the root's
/// `defaults`); none when no such change awaits.
pub(crate) fn approvers_of_change(
    state: &State,
    defaults: &crate::access::Access,
) -> Option<crate::access::Access> {
    let unapproved = state.recorded_config.as_ref()?.unapproved.as_ref()?;
    let before = crate::access::Access {
        approvers: unapproved.approvers_before.clone(),
        operators: None,
        viewers: None,
    };
    Some(before.over(defaults))
}

/// Whether loop.toml's text sets `[approval] config_changes = "await"`.
fn awaits_changes(text: &str) -> bool {
    let table = table(text);
    let setting = table.get("approval").and_then(|a| a.get("config_changes"));
    setting.and_then(toml::Value::as_str) == Some("await")
}

/// loop.toml's text as a table (a text that no longer parses compares as
/// empty, so whatever it set counts as changed).
fn table(text: &str) -> toml::Table {
    text.parse().unwrap_or_default()
}

/// The unified diff of loop.toml, cut to [`DIFF_MAX`] bytes.
pub fn diff(before: &str, after: &str) -> String {
    if before == after {
        return String::new();
    }
    let text = similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header("loop.toml (recorded)", "loop.toml (now)")
        .to_string();
    bound(text)
}

/// `text` cut at a character boundary within [`DIFF_MAX`] bytes, with a
/// line saying how much more there was.
fn bound(mut text: String) -> String {
    if text.len() <= DIFF_MAX {
        return text;
    }
    let mut cut = DIFF_MAX;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let more = text.len() - cut;
    text.truncate(cut);
    text += &format!("\n… {more} bytes more\n");
    text
}

/// A digest's first 12 hex digits.
pub fn short(hex: &str) -> &str {
    &hex[..hex.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current(text: &str, root: RootFile) -> Current {
        Current {
            hashes: Hashes {
                loop_toml: sha256(text.as_bytes()),
                automaton_toml: root,
            },
            text: text.to_owned(),
            host: "h".to_owned(),
        }
    }

    fn recorded(text: &str) -> State {
        let mut state = State::new(Timestamp::UNIX_EPOCH);
        take_in(
            &mut state,
            &current(text, RootFile::Absent),
            ConfigChanges::Await,
            Via::Outside,
            None,
        );
        state
    }

    #[test]
    fn the_first_record_is_no_change() {
        let state = recorded("step = \"true\"\n");
        assert!(state.recorded_config.is_some());
    }

    #[test]
    fn a_removed_gate_is_a_change_to_the_rules_that_awaits() {
        let old = "step = \"true\"\n[[gate]]\nuse = \"stock:approval\"\n";
        let mut state = recorded(old);
        let now = current("step = \"true\"\n", RootFile::Absent);
        let change = take_in(&mut state, &now, ConfigChanges::Await, Via::Outside, None).unwrap();
        assert_eq!(change.rules, [Rule::Gates]);
        assert!(change.awaits);
        assert!(
            change.diff.contains("-use = \"stock:approval\""),
            "{}",
            change.diff
        );
        assert_eq!(change.after, now.hashes);
        let kept = state.recorded_config.as_ref().unwrap();
        assert_eq!(kept.on("h"), Some(now.hashes.clone()));
        assert_eq!(kept.unapproved.as_ref().unwrap().rules, [Rule::Gates]);
        assert_eq!(
            take_in(&mut state, &now, ConfigChanges::Await, Via::Outside, None),
            None
        );
    }

    #[test]
    fn no_longer_requiring_signed_gates_is_a_change_to_the_gates_rules() {
        let mut state = recorded("step = \"true\"\n[gates]\nrequire_signed = true\n");
        let now = current("step = \"true\"\n", RootFile::Absent);
        let change = take_in(&mut state, &now, ConfigChanges::Await, Via::Outside, None).unwrap();
        assert_eq!(change.rules, [Rule::Gates]);
        assert!(change.awaits);
    }

    #[test]
    fn turning_the_setting_off_is_awaited_under_the_setting_as_it_was() {
        let mut state = recorded("step = \"true\"\n[approval]\nconfig_changes = \"await\"\n");
        let now = current("step = \"true\"\n", RootFile::Absent);
        let change = take_in(&mut state, &now, ConfigChanges::Record, Via::Outside, None).unwrap();
        assert_eq!(change.rules, [Rule::Approval]);
        assert!(change.awaits);
    }

    #[test]
    fn a_harmless_change_is_recorded_and_awaits_nothing() {
        let mut state = recorded("step = \"true\"\n");
        let now = current("step = \"false\"\ndescription = \"x\"\n", RootFile::Absent);
        let change = take_in(&mut state, &now, ConfigChanges::Await, Via::Outside, None).unwrap();
        assert!(change.rules.is_empty() && !change.awaits);
        assert!(state.recorded_config.unwrap().unapproved.is_none());
    }

    #[test]
    fn each_host_is_told_against_its_own_automaton_toml() {
        let mut state = recorded("step = \"true\"\n");
        let mut other = current("step = \"true\"\n", RootFile::Sha256("ab".into()));
        other.host = "other".into();
        assert_eq!(
            take_in(&mut state, &other, ConfigChanges::Await, Via::Outside, None),
            None
        );
        assert!(!other.unrecorded(&state));
        let here = current("step = \"true\"\n", RootFile::Absent);
        assert!(!here.unrecorded(&state));
        assert_eq!(
            take_in(&mut state, &here, ConfigChanges::Await, Via::Outside, None),
            None
        );
        other.hashes.automaton_toml = RootFile::Sha256("cd".into());
        assert!(other.unrecorded(&state));
        let change = take_in(&mut state, &other, ConfigChanges::Await, Via::Outside, None).unwrap();
        assert_eq!(change.rules, [Rule::RootConfig]);
        assert_eq!(change.before.automaton_toml, RootFile::Sha256("ab".into()));
    }

    #[test]
    fn a_step_table_and_the_root_config_are_rules() {
        let mut state = recorded("[step]\ncommand = \"true\"\nconfine = true\n");
        let now = current(
            "[step]\ncommand = \"true\"\nconfine = false\n",
            RootFile::Sha256("ab".into()),
        );
        let change = take_in(&mut state, &now, ConfigChanges::Record, Via::Outside, None).unwrap();
        assert_eq!(change.rules, [Rule::Step, Rule::RootConfig]);
        assert!(!change.awaits);
    }

    #[test]
    fn the_steps_command_is_not_a_rule_in_either_form() {
        let mut state = recorded("step = \"true\"\n");
        let now = current("[step]\ncommand = \"false\"\n", RootFile::Absent);
        let change = take_in(&mut state, &now, ConfigChanges::Record, Via::Outside, None).unwrap();
        assert_eq!(change.rules, []);
        let now = current(
            "[step]\ncommand = \"false\"\nconfine = \"off\"\n",
            RootFile::Absent,
        );
        let change = take_in(&mut state, &now, ConfigChanges::Record, Via::Outside, None).unwrap();
        assert_eq!(change.rules, [Rule::Step]);
    }

    #[test]
    fn diffs_are_bounded_and_say_what_was_left_out() {
        let before: String = (0..2000).map(|i| format!("a{i} = {i}\n")).collect();
        let text = diff(&before, "");
        assert!(text.len() < DIFF_MAX + 64, "{}", text.len());
        assert!(
            text.trim_end().ends_with("bytes more"),
            "{}",
            &text[text.len() - 40..]
        );
        let absent: RootFile = serde_json::from_str("\"absent\"").unwrap();
        assert_eq!(absent, RootFile::Absent);
        assert_eq!(serde_json::to_string(&RootFile::Absent).unwrap(), "\"absent\"");
    }
}
