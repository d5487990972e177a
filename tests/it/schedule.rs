//! `schedule install|remove|show` and the halt/resume hooks. `--dry-run`
//! output is checked against each format (INI-like units, a plist, task XML,
//! a crontab line); real installs run against fake `systemctl`, `launchctl`,
//! `crontab` and `schtasks` on PATH that record their calls.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::Env;

/// A root, a fake HOME, and fake scheduler commands that log each call
/// (one line: program and arguments) to `calls`.
struct Fake {
    env: Env,
    home: PathBuf,
    bin: PathBuf,
    calls: PathBuf,
    crontab: PathBuf,
}

const RECORD: &str = "#!/bin/sh\nprintf '%s\\n' \"$(basename \"$0\") $*\" >> \"$FAKE_CALLS\"\n";

impl Fake {
    fn new() -> Fake {
        let env = Env::new();
        let base = env.root.parent().unwrap().to_path_buf();
        let (home, bin) = (base.join("home"), base.join("bin"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        for tool in ["systemctl", "launchctl", "schtasks"] {
            script(&bin.join(tool), RECORD);
        }
        // crontab -l prints the file (or says there is none), crontab - replaces it.
        script(
            &bin.join("crontab"),
            &format!(
                "{RECORD}case \"$1\" in\n  -l) [ -f \"$FAKE_CRONTAB\" ] || {{ echo \"no crontab for me\" >&2; exit 1; }}; \
                 cat \"$FAKE_CRONTAB\";;\n  -) cat > \"$FAKE_CRONTAB\";;\n  -r) rm \"$FAKE_CRONTAB\";;\nesac\n"
            ),
        );
        Fake {
            calls: base.join("calls"),
            crontab: base.join("crontab"),
            env,
            home,
            bin,
        }
    }

    fn cmd(&self) -> Command {
        let mut c = self.env.cmd();
        c.env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .env("HOME", &self.home)
            .env_remove("XDG_CONFIG_HOME")
            .env("FAKE_CALLS", &self.calls)
            .env("FAKE_CRONTAB", &self.crontab);
        c
    }

    fn run(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let out = self.cmd().args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    }

    fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.run(args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        out
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(&self.calls)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `--dry-run --json` of an install.
    fn plan(&self, name: &str, backend: &str) -> serde_json::Value {
        let out = self.ok(&[
            "schedule",
            "install",
            name,
            "--backend",
            backend,
            "--dry-run",
            "--json",
        ]);
        serde_json::from_str(&out).unwrap()
    }

    /// `--dry-run --json` of an install to the default backend.
    fn plan_default(&self, name: &str) -> serde_json::Value {
        let out = self.ok(&["schedule", "install", name, "--dry-run", "--json"]);
        serde_json::from_str(&out).unwrap()
    }
}

fn script(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn looped(f: &Fake, name: &str, schedule: &str) {
    f.env
        .new_loop(name, &format!("step = \"true\"\n[schedule]\n{schedule}\n"));
}

/// A systemd unit as sections of key → values (keys may repeat).
fn unit(text: &str) -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut section = None;
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(s.to_owned());
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not key=value: {line}"));
        let s = section
            .clone()
            .unwrap_or_else(|| panic!("key outside a section: {line}"));
        out.entry(s)
            .or_default()
            .entry(k.into())
            .or_default()
            .push(v.into());
    }
    out
}

fn file_text<'a>(plan: &'a serde_json::Value, suffix: &str) -> &'a str {
    plan["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"].as_str().unwrap().ends_with(suffix))
        .unwrap_or_else(|| panic!("no {suffix} in {plan}"))["text"]
        .as_str()
        .unwrap()
}

#[test]
fn systemd_dry_run_writes_a_timer_and_a_service_and_touches_nothing() {
    let f = Fake::new();
    looped(&f, "hello", "every = \"5m\"\njitter = \"30s\"");
    let plan = f.plan("hello", "systemd");
    let name = plan["record"]["name"].as_str().unwrap();
    assert!(name.starts_with("automaton-hello-"), "{name}");
    let service = unit(file_text(&plan, ".service"));
    let exec = &service["Service"]["ExecStart"][0];
    assert!(
        exec.contains("\"--root\"") && exec.ends_with("\"tick\" \"hello\" \"--fired-by\" \"systemd\""),
        "{exec}"
    );
    assert!(exec.contains(&f.env.root.display().to_string()), "{exec}");
    assert_eq!(service["Service"]["Type"], ["oneshot"]);
    let timer = unit(file_text(&plan, ".timer"));
    assert_eq!(timer["Timer"]["OnUnitActiveSec"], ["300s"]);
    assert_eq!(timer["Timer"]["OnActiveSec"], ["300s"]);
    assert_eq!(timer["Timer"]["RandomizedDelaySec"], ["30s"]);
    assert_eq!(timer["Timer"]["Unit"], [format!("{name}.service")]);
    assert_eq!(timer["Install"]["WantedBy"], ["timers.target"]);
    let commands: Vec<String> = plan["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c.as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_str().unwrap())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    assert_eq!(
        commands,
        [
            "systemctl --user daemon-reload".to_owned(),
            format!("systemctl --user enable --now {name}.timer")
        ]
    );
    assert!(f.calls().is_empty(), "a dry run ran {:?}", f.calls());
    assert!(!f.home.join(".config").exists());
    assert!(!f.env.root.join("schedules").exists());
}

#[test]
fn systemd_maps_cron_to_on_calendar_and_refuses_either_day() {
    let f = Fake::new();
    looped(&f, "weekdays", "cron = \"30 9 * * mon-fri\"");
    let timer = unit(file_text(&f.plan("weekdays", "systemd"), ".timer"));
    assert_eq!(timer["Timer"]["OnCalendar"], ["Mon..Fri *-*-* 09:30:00"]);
    assert_eq!(timer["Timer"]["Persistent"], ["true"]);
    looped(&f, "either", "cron = \"0 0 1 * mon\"");
    let (code, _, err) = f.run(&[
        "schedule",
        "install",
        "either",
        "--backend",
        "systemd",
        "--dry-run",
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("systemd cannot run cron = \"0 0 1 * mon\""), "{err}");
}

#[test]
fn launchd_dry_run_is_a_plist_with_label_arguments_and_interval() {
    let f = Fake::new();
    looped(&f, "hello", "every = \"5m\"");
    let plan = f.plan("hello", "launchd");
    let text = file_text(&plan, ".plist");
    let p = plist::Value::from_reader_xml(text.as_bytes()).unwrap();
    let d = p.as_dictionary().unwrap();
    let label = d["Label"].as_string().unwrap();
    assert!(label.starts_with("dev.automaton.hello-"), "{label}");
    assert_eq!(plan["record"]["name"], label);
    let args: Vec<&str> = d["ProgramArguments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_string().unwrap())
        .collect();
    assert_eq!(
        args[1..],
        [
            "--root",
            f.env.root.to_str().unwrap(),
            "tick",
            "hello",
            "--fired-by",
            "launchd"
        ]
    );
    assert!(Path::new(args[0]).is_absolute());
    assert_eq!(d["StartInterval"].as_unsigned_integer(), Some(300));

    looped(&f, "nightly", "cron = \"15 3 * * *\"");
    let text = file_text(&f.plan("nightly", "launchd"), ".plist").to_owned();
    let p = plist::Value::from_reader_xml(text.as_bytes()).unwrap();
    let cal = p.as_dictionary().unwrap()["StartCalendarInterval"]
        .as_array()
        .unwrap()
        .clone();
    let first = cal[0].as_dictionary().unwrap();
    assert_eq!(cal.len(), 1);
    assert_eq!(first["Hour"].as_unsigned_integer(), Some(3));
    assert_eq!(first["Minute"].as_unsigned_integer(), Some(15));
}

#[test]
fn schtasks_dry_run_is_task_xml() {
    let f = Fake::new();
    looped(&f, "hello", "every = \"10m\"\njitter = \"1m\"");
    let plan = f.plan("hello", "schtasks");
    let xml = file_text(&plan, ".xml");
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut path: Vec<String> = Vec::new();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    loop {
        match reader.read_event().unwrap() {
            quick_xml::events::Event::Start(e) => {
                path.push(e.name().0.to_owned());
            }
            quick_xml::events::Event::End(_) => {
                path.pop();
            }
            quick_xml::events::Event::Text(t) => {
                seen.insert(path.join("/"), t.into_inner().into_owned());
            }
            quick_xml::events::Event::Eof => break,
            _ => {}
        }
    }
    assert!(path.is_empty(), "unbalanced XML");
    assert_eq!(seen["Task/Triggers/TimeTrigger/Repetition/Interval"], "PT10M");
    assert_eq!(seen["Task/Triggers/TimeTrigger/RandomDelay"], "PT1M");
    assert_eq!(seen["Task/Settings/MultipleInstancesPolicy"], "IgnoreNew");
    assert!(Path::new(&seen["Task/Actions/Exec/Command"]).is_absolute());
    assert!(seen["Task/Actions/Exec/Arguments"].ends_with("tick hello --fired-by schtasks"));
    assert!(xml.contains("xmlns=\"http://schemas.microsoft.com/windows/2004/02/mit/task\""));
    let name = plan["record"]["name"].as_str().unwrap();
    assert!(name.starts_with("\\automaton\\hello-"), "{name}");
}

#[test]
fn cron_dry_run_is_one_crontab_line_and_inexact_cadences_are_refused() {
    let f = Fake::new();
    looped(&f, "hello", "every = \"15m\"");
    let out = f.ok(&["schedule", "install", "hello", "--backend", "cron", "--dry-run"]);
    let line = out
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("*/15"))
        .unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields[..5], ["*/15", "*", "*", "*", "*"]);
    assert!(line.ends_with("'tick' 'hello' '--fired-by' 'cron'"), "{line}");
    assert!(f.calls().is_empty());
    looped(&f, "odd", "every = \"7m\"");
    let (code, _, err) = f.run(&["schedule", "install", "odd", "--backend", "cron"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("cron cannot run every = \"7m\"") && err.contains("`cron =`"),
        "{err}"
    );
    assert!(
        !f.crontab.exists() && f.calls().is_empty(),
        "a refusal touched nothing"
    );
}

#[test]
fn systemd_install_show_remove_run_the_right_commands() {
    let f = Fake::new();
    looped(&f, "hello", "every = \"1m\"");
    let out = f.ok(&["schedule", "install", "hello", "--backend", "systemd"]);
    assert!(out.contains("installed the systemd schedule"), "{out}");
    let rec: serde_json::Value =
        serde_json::from_str(&f.ok(&["schedule", "show", "hello", "--json"])).unwrap();
    let name = rec["name"].as_str().unwrap().to_owned();
    assert_eq!(
        (rec["backend"].as_str(), rec["enabled"].as_bool()),
        (Some("systemd"), Some(true))
    );
    let units = f.home.join(".config/systemd/user");
    assert!(units.join(format!("{name}.timer")).is_file());
    assert!(units.join(format!("{name}.service")).is_file());
    assert_eq!(
        f.calls(),
        [
            "systemctl --user daemon-reload".to_owned(),
            format!("systemctl --user enable --now {name}.timer")
        ]
    );
    assert!(f.ok(&["schedule", "show"]).contains(&name));

    std::fs::remove_file(&f.calls).unwrap();
    f.ok(&["schedule", "remove", "hello"]);
    assert_eq!(
        f.calls(),
        [
            format!("systemctl --user disable --now {name}.timer"),
            "systemctl --user daemon-reload".to_owned()
        ]
    );
    assert!(!units.join(format!("{name}.timer")).exists());
    assert!(
        f.ok(&["schedule", "show", "hello"])
            .contains("no OS schedule installed")
    );
    let (code, _, err) = f.run(&["schedule", "remove", "hello"]);
    assert_eq!(code, Some(1), "{err}");
}

#[test]
fn cron_install_and_remove_touch_only_their_line() {
    let f = Fake::new();
    std::fs::write(&f.crontab, "MAILTO=me\n0 * * * * backup\n").unwrap();
    looped(&f, "hello", "cron = \"*/5 * * * *\"");
    f.ok(&["schedule", "install", "hello", "--backend", "cron"]);
    let tab = std::fs::read_to_string(&f.crontab).unwrap();
    assert!(
        tab.starts_with("MAILTO=me\n0 * * * * backup\n# automaton hello-"),
        "{tab}"
    );
    let job = tab.lines().last().unwrap();
    assert!(
        job.starts_with("*/5 * * * * '") && job.ends_with("'tick' 'hello' '--fired-by' 'cron'"),
        "{job}"
    );
    // Installing again replaces the line.
    f.ok(&["schedule", "install", "hello", "--backend", "cron"]);
    assert_eq!(std::fs::read_to_string(&f.crontab).unwrap(), tab);
    f.ok(&["schedule", "remove", "hello"]);
    assert_eq!(
        std::fs::read_to_string(&f.crontab).unwrap(),
        "MAILTO=me\n0 * * * * backup\n"
    );
}

#[test]
fn launchd_and_schtasks_install_register_their_files() {
    let f = Fake::new();
    looped(&f, "hello", "every = \"5m\"");
    f.ok(&["schedule", "install", "hello", "--backend", "launchd"]);
    let rec: serde_json::Value =
        serde_json::from_str(&f.ok(&["schedule", "show", "hello", "--json"])).unwrap();
    let plist = rec["files"][0].as_str().unwrap();
    assert!(Path::new(plist).starts_with(f.home.join("Library/LaunchAgents")) && Path::new(plist).is_file());
    let uid = nix::unistd::getuid();
    assert_eq!(
        f.calls().last().unwrap(),
        &format!("launchctl bootstrap gui/{uid} {plist}")
    );
    // Installing with another backend replaces the first.
    std::fs::remove_file(&f.calls).unwrap();
    f.ok(&["schedule", "install", "hello", "--backend", "schtasks"]);
    let rec: serde_json::Value =
        serde_json::from_str(&f.ok(&["schedule", "show", "hello", "--json"])).unwrap();
    let (task, xml) = (rec["name"].as_str().unwrap(), rec["files"][0].as_str().unwrap());
    let calls = f.calls();
    let bootout = format!("launchctl bootout gui/{uid}/dev.automaton.hello-");
    assert!(calls.iter().any(|c| c.starts_with(&bootout)), "{calls:?}");
    assert!(!Path::new(plist).exists());
    assert_eq!(
        calls.last().unwrap(),
        &format!("schtasks /Create /XML {xml} /TN {task} /F")
    );
}

#[test]
fn a_halting_tick_disables_the_schedule_and_resume_enables_it() {
    let f = Fake::new();
    // A gate that cannot load halts the loop (fail closed).
    f.env.new_loop(
        "fragile",
        "step = \"true\"\n[schedule]\nevery = \"1m\"\n[[gate]]\npath = \"missing.wasm\"\n",
    );
    f.ok(&["schedule", "install", "fragile", "--backend", "systemd"]);
    let rec: serde_json::Value =
        serde_json::from_str(&f.ok(&["schedule", "show", "fragile", "--json"])).unwrap();
    let timer = format!("{}.timer", rec["name"].as_str().unwrap());
    std::fs::remove_file(&f.calls).unwrap();

    let (code, _, err) = f.run(&["tick", "fragile"]);
    assert_eq!(code, Some(7), "{err}");
    assert_eq!(f.calls(), [format!("systemctl --user disable --now {timer}")]);
    let rec: serde_json::Value =
        serde_json::from_str(&f.ok(&["schedule", "show", "fragile", "--json"])).unwrap();
    assert_eq!(rec["enabled"], false);
    assert!(f.ok(&["schedule", "show"]).contains("disabled"));
    // An inactive tick changes nothing more.
    f.ok(&["tick", "fragile"]);
    assert_eq!(f.calls().len(), 1);

    f.ok(&["resume", "fragile"]);
    assert_eq!(f.calls()[1..], [format!("systemctl --user enable --now {timer}")]);
    let rec: serde_json::Value =
        serde_json::from_str(&f.ok(&["schedule", "show", "fragile", "--json"])).unwrap();
    assert_eq!(rec["enabled"], true);
}

#[test]
fn a_failing_scheduler_command_never_fails_the_tick() {
    let f = Fake::new();
    f.env.new_loop(
        "fragile",
        "step = \"true\"\n[schedule]\nevery = \"1m\"\n[[gate]]\npath = \"missing.wasm\"\n",
    );
    f.ok(&["schedule", "install", "fragile", "--backend", "systemd"]);
    script(
        &f.bin.join("systemctl"),
        "#!/bin/sh\necho 'Failed to connect to bus' >&2\nexit 1\n",
    );
    let (code, _, err) = f.run(&["tick", "fragile"]);
    assert_eq!(code, Some(7), "the tick's own outcome: {err}");
    assert!(
        err.contains("could not disable") && err.contains("Failed to connect to bus"),
        "{err}"
    );
    let rec: serde_json::Value =
        serde_json::from_str(&f.ok(&["schedule", "show", "fragile", "--json"])).unwrap();
    assert_eq!(
        rec["enabled"], true,
        "still recorded as enabled, so resume or a later halt tries again"
    );
}

#[test]
fn removing_a_loop_removes_its_schedule() {
    let f = Fake::new();
    looped(&f, "hello", "every = \"1m\"");
    f.ok(&["schedule", "install", "hello", "--backend", "cron"]);
    assert!(
        std::fs::read_to_string(&f.crontab)
            .unwrap()
            .contains("'tick' 'hello'")
    );
    f.ok(&["rm", "hello", "--force"]);
    assert!(!f.crontab.exists(), "no crontab, as before the install");
    assert!(f.ok(&["schedule", "show"]).contains("no OS schedules installed"));
}

#[test]
fn the_default_backend_is_systemd_when_systemctl_user_answers_else_cron() {
    let f = Fake::new();
    looped(&f, "hello", "every = \"5m\"");
    assert_eq!(f.plan_default("hello")["record"]["backend"], "systemd");
    script(&f.bin.join("systemctl"), "#!/bin/sh\nexit 1\n");
    assert_eq!(f.plan_default("hello")["record"]["backend"], "cron");
}

#[test]
fn check_gate_apply_that_halts_disables_the_schedule() {
    let f = Fake::new();
    f.env.new_loop(
        "fragile",
        "step = \"true\"\n[schedule]\nevery = \"5m\"\n[[gate]]\npath = \"missing.wasm\"\n",
    );
    f.ok(&["schedule", "install", "fragile", "--backend", "cron"]);
    let (code, _, err) = f.run(&["check-gate", "fragile", "--apply"]);
    assert_eq!(code, Some(7), "{err}");
    let tab = std::fs::read_to_string(&f.crontab).unwrap();
    let job = tab.lines().last().unwrap();
    assert!(job.starts_with("#*/5 * * * *"), "{tab}");
    f.ok(&["resume", "fragile"]);
    let tab = std::fs::read_to_string(&f.crontab).unwrap();
    assert!(tab.lines().last().unwrap().starts_with("*/5 * * * *"), "{tab}");
}

#[test]
fn a_systemd_install_warns_when_lingering_is_off() {
    let f = Fake::new();
    looped(&f, "hello", "every = \"1m\"");
    for (linger, warned) in [("no", true), ("yes", false)] {
        script(
            &f.bin.join("loginctl"),
            &format!("#!/bin/sh\necho Linger={linger}\n"),
        );
        let (code, _, err) = f.run(&["schedule", "install", "hello", "--backend", "systemd"]);
        assert_eq!(code, Some(0), "{err}");
        assert_eq!(
            err.contains("loginctl enable-linger"),
            warned,
            "Linger={linger}: {err}"
        );
    }
}

#[test]
fn installing_then_removing_a_cron_schedule_leaves_no_crontab() {
    let f = Fake::new();
    looped(&f, "hello", "every = \"1m\"");
    assert!(!f.crontab.exists());
    f.ok(&["schedule", "install", "hello", "--backend", "cron"]);
    assert!(f.crontab.exists());
    f.ok(&["schedule", "remove", "hello"]);
    assert!(!f.crontab.exists(), "no crontab, not an empty one");
    assert!(f.calls().contains(&"crontab -r".to_owned()), "{:?}", f.calls());
}

#[test]
fn a_time_zone_goes_to_systemd_and_is_refused_where_it_cannot_be_said() {
    let f = Fake::new();
    looped(
        &f,
        "hello",
        "cron = \"30 9 * * 1-5\"\ntimezone = \"Europe/Berlin\"",
    );
    let plan = f.plan("hello", "systemd");
    let timer = file_text(&plan, ".timer");
    assert!(
        timer.contains("OnCalendar=Mon..Fri *-*-* 09:30:00 Europe/Berlin"),
        "{timer}"
    );
    for backend in ["cron", "launchd", "schtasks"] {
        let (code, _, err) = f.run(&["schedule", "install", "hello", "--backend", backend, "--dry-run"]);
        assert_eq!(code, Some(1), "{backend}: {err}");
        assert!(
            err.contains("Europe/Berlin") && err.contains("time zone"),
            "{err}"
        );
    }
    let show = f.ok(&["schedule", "install", "hello", "--backend", "systemd"]);
    assert!(show.contains("installed"), "{show}");
    let rec: serde_json::Value =
        serde_json::from_str(&f.ok(&["schedule", "show", "hello", "--json"])).unwrap();
    assert_eq!(
        rec["cadence"],
        "cron = \"30 9 * * 1-5\", timezone = \"Europe/Berlin\""
    );
}

#[test]
fn new_refuses_schedules_that_cannot_run_as_written() {
    let env = Env::new();
    for (schedule, says) in [
        (
            "cron = \"61 * * * *\"",
            "minute field \"61\": number out of bounds (0-59)",
        ),
        ("cron = \"*/0 * * * *\"", "minute field \"*/0\": "),
        ("cron = \"0 0 31 2 *\"", "never fires"),
        ("every = \"1s\"\njitter = \"10s\"", "shorter than the cadence"),
        (
            "cron = \"*/5 * * * *\"\njitter = \"5m\"",
            "shorter than the cadence",
        ),
        (
            "cron = \"0 9 * * *\"\ntimezone = \"Mars/Olympus\"",
            "Mars/Olympus",
        ),
    ] {
        let file = env.root.with_file_name("bad.toml");
        std::fs::write(&file, format!("step = \"true\"\n[schedule]\n{schedule}\n")).unwrap();
        let err = env.fails(5, &["new", "bad", "--from", file.to_str().unwrap()]);
        assert!(err.contains(says), "{schedule}: {err}");
        assert!(
            err.contains("bad.toml:2"),
            "names the file and the [schedule] line: {err}"
        );
        assert!(!env.loop_dir("bad").exists(), "{schedule}: nothing created");
    }
    env.new_loop(
        "good",
        "step = \"true\"\n[schedule]\ncron = \"30 2 * * *\"\ntimezone = \"Europe/Berlin\"\njitter = \"1m\"\n",
    );
}

#[test]
fn an_unreadable_schedule_record_is_said_as_such_and_remove_with_a_backend_clears_it() {
    let f = Fake::new();
    looped(&f, "hello", "every = \"5m\"");
    f.ok(&["schedule", "install", "hello", "--backend", "cron"]);
    let record = f.env.root.join("schedules/hello.json");
    std::fs::write(&record, "{ not json").unwrap();
    let (code, _, err) = f.run(&["schedule", "show", "hello"]);
    assert_eq!(code, Some(5), "{err}");
    assert!(
        err.contains("schedule record") && err.contains("hello.json"),
        "{err}"
    );
    assert!(!err.contains("state file"), "{err}");
    f.ok(&["schedule", "remove", "hello", "--backend", "cron"]);
    assert!(!record.exists());
    assert!(
        !std::fs::read_to_string(&f.crontab)
            .unwrap_or_default()
            .contains("tick hello")
    );
}

#[test]
fn a_rejected_loop_has_its_schedule_disabled() {
    let f = Fake::new();
    looped(&f, "agent", "every = \"5m\"");
    f.ok(&["schedule", "install", "agent", "--backend", "cron"]);
    f.ok(&["reject", "agent", "--halt", "--reason", "wrong direction"]);
    let tab = std::fs::read_to_string(&f.crontab).unwrap();
    assert!(tab.lines().last().unwrap().starts_with("#*/5 * * * *"), "{tab}");
    f.ok(&["resume", "agent"]);
    let tab = std::fs::read_to_string(&f.crontab).unwrap();
    assert!(tab.lines().last().unwrap().starts_with("*/5 * * * *"), "{tab}");
}

/// The user's real crontab, put back as it was however the test ends.
struct RealCrontab(Option<Vec<u8>>);

impl RealCrontab {
    fn save() -> RealCrontab {
        let out = Command::new("crontab").arg("-l").output().unwrap();
        RealCrontab(out.status.success().then_some(out.stdout))
    }

    fn read() -> String {
        let out = Command::new("crontab").arg("-l").output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for RealCrontab {
    fn drop(&mut self) {
        match &self.0 {
            Some(tab) => {
                let mut c = Command::new("crontab")
                    .arg("-")
                    .stdin(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                std::io::Write::write_all(&mut c.stdin.take().unwrap(), tab).unwrap();
                c.wait().unwrap();
            }
            None => {
                let _ = Command::new("crontab").arg("-r").output();
            }
        }
    }
}

/// The same against the system's own `crontab` (Debian's cron): a loop
/// halted by `reject` is no longer fired, and `resume` fires it again.
/// It changes the running user's crontab and puts it back, so it runs only
/// where `AUTOMATON_REAL_CRONTAB=1` says that is fine (CI sets it).
#[test]
fn a_rejected_loop_is_disabled_in_the_real_crontab() {
    if std::env::var("AUTOMATON_REAL_CRONTAB").as_deref() != Ok("1") {
        eprintln!(
            "a_rejected_loop_is_disabled_in_the_real_crontab: skipped: AUTOMATON_REAL_CRONTAB is not 1"
        );
        return;
    }
    let _saved = RealCrontab::save();
    let env = Env::new();
    env.new_loop("agent", "step = \"true\"\n[schedule]\nevery = \"5m\"\n");
    env.ok(&["schedule", "install", "agent", "--backend", "cron"]);
    let line = |tab: &str| {
        tab.lines()
            .find(|l| l.contains("'tick' 'agent'") && l.contains(env.root.to_str().unwrap()))
            .map(str::to_owned)
    };
    let installed = line(&RealCrontab::read()).expect("the job is in the crontab");
    assert!(installed.starts_with("*/5 * * * *"), "{installed}");
    env.ok(&["reject", "agent", "--halt"]);
    let rejected = line(&RealCrontab::read()).expect("the job stays, disabled");
    assert!(rejected.starts_with("#*/5 * * * *"), "{rejected}");
    env.ok(&["resume", "agent"]);
    let resumed = line(&RealCrontab::read()).unwrap();
    assert!(resumed.starts_with("*/5 * * * *"), "{resumed}");
    env.ok(&["rm", "agent", "--force"]);
    assert!(line(&RealCrontab::read()).is_none(), "removed with the loop");
}

/// Cron has no jitter: an install, and its dry run, say so once each, and
/// `show` says so; removing the schedule, even by naming the backend
/// with nothing on record, says nothing of it.
#[test]
fn a_jitter_cron_cannot_apply_is_warned_of_once_at_install_only() {
    let f = Fake::new();
    looped(&f, "hello", "every = \"15m\"\njitter = \"30s\"");
    let warnings = |args: &[&str]| {
        let (code, out, err) = f.run(args);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        (out, err.matches("cron has no jitter").count())
    };
    let install = ["schedule", "install", "hello", "--backend", "cron"];
    assert_eq!(warnings(&[&install[..], &["--dry-run"]].concat()).1, 1);
    assert_eq!(warnings(&install).1, 1);
    assert_eq!(warnings(&["schedule", "remove", "hello"]).1, 0);
    let remove = ["schedule", "remove", "hello", "--backend", "cron"];
    assert_eq!(warnings(&remove).1, 0);
    assert_eq!(warnings(&install).1, 1);
    let (shown, n) = warnings(&["schedule", "show", "hello"]);
    assert_eq!(n, 0);
    assert!(
        shown.contains("\njitter     not applied (cron has none)\n"),
        "{shown}"
    );
}

/// Each tick says what fired it, in history and in the ledger: an OS
/// schedule's entry says which scheduler it is (`tick --fired-by`); an
/// entry written before entries said so is known by the loop's record of
/// its install; a tick run by hand is a person's.
#[test]
fn a_tick_records_what_fired_it() {
    let f = Fake::new();
    looped(&f, "hello", "cron = \"*/5 * * * *\"");
    f.ok(&["tick", "hello", "--fired-by", "cron"]);
    f.ok(&["tick", "hello"]);
    f.ok(&["schedule", "install", "hello", "--backend", "systemd"]);
    // An older build's entry: no --fired-by, nobody at a terminal.
    f.ok(&["tick", "hello"]);
    let fired: Vec<String> = f
        .env
        .history("hello")
        .iter()
        .filter(|e| e["kind"] == "tick")
        .map(|e| e["fired_by"].as_str().unwrap_or("none").to_owned())
        .collect();
    assert_eq!(fired, ["cron", "person", "systemd"]);
    // The OS schedulers' firings are in the ledger; a person's tick is
    // no firing of the schedule.
    let fires: Vec<serde_json::Value> = serde_json::from_str(&f.ok(&["fires", "hello", "--json"])).unwrap();
    let by: Vec<(&str, &str)> = fires
        .iter()
        .map(|r| (r["kind"].as_str().unwrap(), r["fired_by"].as_str().unwrap()))
        .collect();
    assert_eq!(by, [("ran", "cron"), ("ran", "systemd")], "{fires:#?}");
    assert!(f.ok(&["fires", "hello"]).contains("(fired by cron)"));
    let status = f.ok(&["status", "hello"]);
    assert!(status.contains("systemd, its OS schedule"), "{status}");
}
