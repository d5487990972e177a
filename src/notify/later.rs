//! The console's notify commands, run after the change's answer: a
//! server starts a [`Commands`] queue, and every notify command a change
//! made there calls runs on its one thread, in the order the changes were
//! made, never in the request. Without a queue (the command line, the
//! daemon's workers) a notify command runs where it is called.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::Notice;
use crate::config::{CommandLine, LoopConfig};
use crate::root::Root;

/// One notify command to run, with all it is given.
struct Job {
    command: CommandLine,
    config: Box<LoopConfig>,
    root: Root,
    base: PathBuf,
    notice: Box<Notice>,
}

static STARTED: Mutex<Option<mpsc::Sender<Job>>> = Mutex::new(None);

/// The queue of a server's notify commands: started with it, and on drop
/// closed, the commands already queued run (each within its timeout).
pub(crate) struct Commands {
    thread: Option<JoinHandle<()>>,
}

impl Commands {
    pub(crate) fn start() -> Commands {
        let (tx, rx) = mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("automaton-notify".into())
            .spawn(move || {
                for job in rx {
                    super::command::run(&job.command, &job.config, &job.root, &job.base, &job.notice);
                }
            });
        match spawned {
            Ok(thread) => {
                if let Ok(mut started) = STARTED.lock() {
                    *started = Some(tx);
                }
                Commands { thread: Some(thread) }
            }
            Err(e) => {
                tracing::warn!("notify commands run in the request: cannot start a thread: {e}");
                Commands { thread: None }
            }
        }
    }
}

impl Drop for Commands {
    fn drop(&mut self) {
        if let Ok(mut started) = STARTED.lock() {
            started.take();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Runs `command` for `notice` on the queue when one is started, else now.
pub(super) fn run(
    command: &CommandLine,
    config: &LoopConfig,
    root: &Root,
    base: &std::path::Path,
    notice: &Notice,
) {
    let queue = STARTED.lock().ok().and_then(|s| s.clone());
    let Some(queue) = queue else {
        return super::command::run(command, config, root, base, notice);
    };
    let job = Job {
        command: command.clone(),
        config: Box::new(config.clone()),
        root: root.clone(),
        base: base.to_owned(),
        notice: Box::new(notice.clone()),
    };
    if let Err(mpsc::SendError(job)) = queue.send(job) {
        super::command::run(&job.command, &job.config, &job.root, &job.base, &job.notice);
    }
}
