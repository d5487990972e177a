//! What is said when a write to the PostgreSQL store fails: the daemon's
//! log says the server's reason for a tick it could not record.

use std::process::Stdio;

use crate::common::Env;

/// The server refuses every commit of a loop and every record of its
/// ledger (triggers that raise): the daemon's log line for the tick it
/// could not record, and its warning about the ledger, say the server's
/// reason, not only what was being done.
#[test]
fn the_daemons_log_says_the_servers_reason() {
    let Some(env) = Env::postgres() else { return };
    env.new_loop("refused", "step = \"true\"\n[schedule]\nevery = \"1h\"\n");
    let pg = env.pg.as_ref().unwrap();
    pg.client()
        .batch_execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN RAISE EXCEPTION 'the test refuses % of %', TG_OP, TG_TABLE_NAME; END $$;
             CREATE TRIGGER refuse BEFORE UPDATE ON loops FOR EACH ROW EXECUTE FUNCTION refuse();
             CREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON fires
                 FOR EACH ROW EXECUTE FUNCTION refuse();",
        )
        .unwrap();
    let log = env.root.with_file_name("daemon.log");
    let mut daemon = env
        .cmd()
        .arg("daemon")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let said = |what: &str| std::fs::read_to_string(&log).unwrap_or_default().contains(what);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !(said("tick failed") && said("not in its ledger")) {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    stop(&mut daemon);
    let text = std::fs::read_to_string(&log).unwrap();
    let line = |what: &str| {
        text.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("{text}"))
            .to_owned()
    };
    let tick = line("tick failed");
    assert!(
        tick.contains("refused: tick failed: loop \"refused\": PostgreSQL store")
            && tick.contains("the test refuses UPDATE of loops"),
        "{tick}"
    );
    let ledger = line("not in its ledger");
    assert!(ledger.contains("the test refuses INSERT of fires"), "{ledger}");
}

fn stop(daemon: &mut std::process::Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(daemon.wait().unwrap().code(), Some(0));
}
