//! `daemon --service`: the daemon as a Windows service. The process is
//! started by the Service Control Manager (`sc.exe create ... binPath=
//! "...automaton.exe --root ROOT daemon --service"`); its main thread hands
//! itself to the SCM's dispatcher, which runs [`service_main`] on a thread
//! of its own. That reports the service running, runs the daemon, and
//! reports it stopped when the daemon returns.
//!
//! A stop or the machine's shutdown reaches the daemon the way Ctrl-Break
//! does ([`super::messages::service_stop`]): no tick is started any more, running
//! ticks have the grace to finish, then their steps are cancelled and the
//! ticks record that. Meanwhile the SCM is told the service is stopping,
//! and for how long at most.

use std::ffi::OsString;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use windows_service::service::{
    ServiceControl, ServiceControlAccept, ServiceExitCode, ServiceState, ServiceStatus, ServiceType,
};
use windows_service::service_control_handler::{self, ServiceControlHandlerResult, ServiceStatusHandle};
use windows_service::{define_windows_service, service_dispatcher};

use super::Options;
use crate::error::{Error, Result};
use crate::root::Root;

/// The name the service is registered under. A service in a process of
/// its own is known by the name `sc.exe create` gave it whatever this
/// says, so any name given at installation works.
const NAME: &str = "automaton";

/// The daemon's run, handed from the main thread to [`service_main`].
type Work = Box<dyn FnOnce() -> Result<()> + Send>;

/// The daemon's grace after a stop.
static GRACE: Mutex<Duration> = Mutex::new(Duration::ZERO);

/// The run [`service_main`] is to do, and then what it came to.
static WORK: Mutex<Option<Work>> = Mutex::new(None);
static OUTCOME: Mutex<Option<Result<()>>> = Mutex::new(None);

/// The service's status handle, and the daemon's grace, once registered.
static STATUS: OnceLock<(ServiceStatusHandle, Duration)> = OnceLock::new();

/// How long the daemon may take to stop past its grace, as the SCM is told.
const STOP_AFTER_GRACE: Duration = Duration::from_secs(30);

define_windows_service!(ffi_service_main, service_main);

/// Runs the daemon on `root` as the service the SCM started this process
/// for; returns once the SCM was told it stopped.
pub(crate) fn run(root: &Root, opts: &Options) -> Result<()> {
    let (root, opts) = (root.clone(), opts.clone());
    let grace = opts.grace;
    *lock(&WORK) = Some(Box::new(move || super::run(&root, &opts)));
    *lock(&GRACE) = grace;
    service_dispatcher::start(NAME, ffi_service_main).map_err(|e| Error::Service {
        reason: format!(
            "not started by the Service Control Manager ({e}): install the service with \
             `sc.exe create` and start it with `sc.exe start` (README, Windows)"
        ),
    })?;
    lock(&OUTCOME).take().unwrap_or(Ok(()))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The service's main, on the dispatcher's thread.
fn service_main(_: Vec<OsString>) {
    let Some(work) = lock(&WORK).take() else {
        return;
    };
    let outcome = serve(work);
    if let Err(e) = &outcome {
        tracing::error!("{}", crate::error::with_causes(e));
    }
    *lock(&OUTCOME) = Some(outcome);
}

fn serve(work: Work) -> Result<()> {
    let failed = |e: windows_service::Error| Error::Service {
        reason: format!("the Service Control Manager: {e}"),
    };
    let handle = service_control_handler::register(NAME, on_control).map_err(failed)?;
    let _ = STATUS.set((handle, *lock(&GRACE)));
    report(handle, ServiceState::Running, 0, Duration::ZERO).map_err(failed)?;
    let outcome = work();
    let code = u32::from(outcome.is_err());
    report(handle, ServiceState::Stopped, code, Duration::ZERO).map_err(failed)?;
    outcome
}

/// The SCM's controls: stop and shutdown stop the daemon as Ctrl-Break
/// does.
fn on_control(control: ServiceControl) -> ServiceControlHandlerResult {
    match control {
        ServiceControl::Stop | ServiceControl::Shutdown | ServiceControl::Preshutdown => {
            super::messages::service_stop();
            if let Some(&(handle, grace)) = STATUS.get() {
                // Ticks may run for the grace, then have their steps
                // stopped and record that.
                let _ = report(handle, ServiceState::StopPending, 0, grace + STOP_AFTER_GRACE);
            }
            ServiceControlHandlerResult::NoError
        }
        ServiceControl::Interrogate => ServiceControlHandlerResult::NoError,
        _ => ServiceControlHandlerResult::NotImplemented,
    }
}

/// Tells the SCM the service is in `state` (`code`: its exit code once
/// stopped, 1 when the daemon failed; `wait`: how long a pending state
/// may last).
fn report(
    handle: ServiceStatusHandle,
    state: ServiceState,
    code: u32,
    wait: Duration,
) -> windows_service::Result<()> {
    let controls_accepted = match state {
        ServiceState::Running => ServiceControlAccept::STOP | ServiceControlAccept::SHUTDOWN,
        _ => ServiceControlAccept::empty(),
    };
    handle.set_service_status(ServiceStatus {
        service_type: ServiceType::OWN_PROCESS,
        current_state: state,
        controls_accepted,
        exit_code: match code {
            0 => ServiceExitCode::Win32(0),
            n => ServiceExitCode::ServiceSpecific(n),
        },
        checkpoint: 0,
        wait_hint: wait,
        process_id: None,
    })
}
