//! Running a step on Windows: the step and every process it starts live in
//! a Job Object made for it, with kill-on-close, so whenever the runner's
//! handle to the job closes (the step's end, or the runner's death however
//! it dies) the whole tree is killed; two steps of one loop never run at
//! once. The job is named `automaton-step-<runner pid>-<id>` (the id is
//! what Unix records as the step's process group), so `cancel`, from
//! another process, opens it by the names in the `in_flight` record and
//! terminates it: the name is the proof, as `/proc` is on Unix (a job of
//! that name exists only while its runner holds it).
//!
//! The step starts suspended, is put in the job, and only then resumes,
//! so nothing it starts escapes the job. Windows has no SIGTERM: a
//! timeout or a cancel terminates the job at once (the kill grace does not
//! apply), and the outcome says the step was killed, as SIGKILL would.
//! Its output is read by one thread per stream into the same bounded
//! sinks as on Unix.

use std::io::{self, Read};
use std::os::windows::io::AsRawHandle;
use std::os::windows::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use windows_sys::Win32::Foundation::{CloseHandle, HANDLE, WAIT_OBJECT_0};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JobObjectExtendedLimitInformation, OpenJobObjectW,
    SetInformationJobObject, TerminateJobObject,
};
use windows_sys::Win32::System::Threading::{
    CREATE_NEW_PROCESS_GROUP, CREATE_SUSPENDED, WaitForSingleObject,
};

use super::output::Sink;
use super::{Started, StepError, StepSpec, check_cwd, resolve_program, spawn_error, withhold_secrets};
use crate::state::ProcessOutcome;

/// The exit code a terminated job's processes end with; the outcome
/// reports it as a kill.
const TERMINATED: u32 = 0xC000_013A;

/// The access rights to a job that `cancel` asks for (winnt.h's).
const JOB_OBJECT_QUERY: u32 = 0x4;
const JOB_OBJECT_TERMINATE: u32 = 0x8;

/// How often the supervising thread looks at the clock and the canceller
/// between waits on the step's exit.
const TICK: Duration = Duration::from_millis(20);

/// The last job id given in this process; ids start at 2 (0 and 1 name
/// no group on Unix, and `cancel` ignores them).
static NEXT_ID: AtomicI32 = AtomicI32::new(1);

/// A job's name, as a NUL-terminated wide string.
fn job_name(runner: u32, id: i32) -> Vec<u16> {
    crate::os::wide(format!("Local\\automaton-step-{runner}-{id}"))
}

/// A handle we own, closed on drop.
#[derive(Debug)]
struct Handle(HANDLE);

// SAFETY: a kernel handle may be used and closed from any thread.
unsafe impl Send for Handle {}
// SAFETY: as above; the calls made on it are thread-safe.
unsafe impl Sync for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: a handle we own, closed once.
        unsafe { CloseHandle(self.0) };
    }
}

/// A step's job, made before the step starts so that its id can be
/// recorded first. Dropping it closes the job, which kills whatever is in
/// it.
pub struct Group {
    job: Arc<Handle>,
    id: i32,
}

impl Group {
    pub fn new() -> io::Result<Group> {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed) + 1;
        let name = job_name(std::process::id(), id);
        // SAFETY: a NUL-terminated name that outlives the call; the
        // limits struct is zeroed, then its one flag set.
        unsafe {
            let job = CreateJobObjectW(std::ptr::null(), name.as_ptr());
            if job.is_null() {
                return Err(io::Error::last_os_error());
            }
            let job = Handle(job);
            // A job of this name already there is someone else's.
            if io::Error::last_os_error().raw_os_error()
                == Some(windows_sys::Win32::Foundation::ERROR_ALREADY_EXISTS as i32)
            {
                return Err(io::ErrorKind::AlreadyExists.into());
            }
            let mut limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = std::mem::zeroed();
            limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
            let ok = SetInformationJobObject(
                job.0,
                JobObjectExtendedLimitInformation,
                (&raw const limits).cast(),
                std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            );
            if ok == 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(Group {
                job: Arc::new(job),
                id,
            })
        }
    }

    /// The job's id (recorded where Unix records the process group).
    pub fn id(&self) -> i32 {
        self.id
    }

    fn terminate(&self) {
        // SAFETY: the job's handle, open while `self` lives.
        unsafe { TerminateJobObject(self.job.0, TERMINATED) };
    }
}

/// Opens the job `id` of runner `runner` with `access`; `None` when there
/// is none.
fn open_job(runner: u32, id: i32, access: u32) -> Option<Handle> {
    let name = job_name(runner, id);
    // SAFETY: a NUL-terminated name that outlives the call.
    let job = unsafe { OpenJobObjectW(access, 0, name.as_ptr()) };
    (!job.is_null()).then_some(Handle(job))
}

/// Whether runner `runner`'s step job `id` exists: it does only while the
/// runner holds it, so it is the step's (or verifier's).
pub(crate) fn has_job(runner: u32, id: i32) -> bool {
    open_job(runner, id, JOB_OBJECT_QUERY).is_some()
}

/// Terminates runner `runner`'s step job `id`, every process in it;
/// false when there is no such job (or it may not be terminated).
pub(crate) fn stop_job(runner: u32, id: i32) -> bool {
    open_job(runner, id, JOB_OBJECT_TERMINATE)
        // SAFETY: a job handle we own, for the call.
        .is_some_and(|job| unsafe { TerminateJobObject(job.0, TERMINATED) } != 0)
}

/// What a cancel asks for: nothing yet, a stop, or a kill (on Windows both
/// terminate the job).
const NONE: u8 = 0;
const STOP: u8 = 1;

/// Stops a running step from another thread: its job is terminated.
#[derive(Debug, Clone)]
pub struct Canceller(Arc<AtomicU8>);

impl Canceller {
    /// Asks for the step to be stopped; does nothing once it has ended.
    pub fn cancel(&self) {
        self.0.store(STOP, Ordering::Relaxed);
    }

    /// Kills the step's whole job at once: for a runner that lost its
    /// loop's lock.
    pub fn kill(&self) {
        self.0.store(STOP, Ordering::Relaxed);
    }
}

/// The deadline by which the step's job is terminated unless a later one
/// comes (the PostgreSQL store's lease), kept by the supervising thread.
#[derive(Debug, Clone, Default)]
pub struct Deadline(Arc<Mutex<Option<Instant>>>);

impl Deadline {
    /// The job is terminated at `at` unless a later deadline comes first.
    pub fn until(&self, at: Instant) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(at);
    }

    fn passed(&self, now: Instant) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|at| now >= at)
    }
}

/// Like [`super::run_with`], in `group` when one was made beforehand (else
/// in a job of its own).
pub(crate) fn run_in(
    spec: &StepSpec,
    group: Option<Group>,
    on_start: impl FnOnce(&Started),
) -> Result<ProcessOutcome, StepError> {
    let program = resolve_program(spec.program, spec.cwd);
    let supervise = |source| StepError::Supervise {
        program: program.clone(),
        source,
    };
    check_cwd(spec.cwd)?;
    if spec.run_as.is_some() {
        return Err(supervise(io::Error::new(
            io::ErrorKind::Unsupported,
            "running a step as another user needs Unix",
        )));
    }
    let group = match group {
        Some(g) => g,
        None => Group::new().map_err(supervise)?,
    };

    let mut cmd = Command::new(&program);
    withhold_secrets(&mut cmd, spec.env);
    cmd.args(spec.args)
        .current_dir(spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .creation_flags(CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP);
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|e| spawn_error(&program, e))?;
    let pid = child.id();
    // SAFETY: the job's and the child's handles, both open.
    let assigned = unsafe { AssignProcessToJobObject(group.job.0, child.as_raw_handle()) } != 0;
    if !assigned || resume(pid).is_err() {
        let e = io::Error::last_os_error();
        let _ = child.kill();
        let _ = child.wait();
        return Err(supervise(e));
    }
    tracing::debug!(program = %program.display(), pid, job = group.id, "step started");
    let canceller = Canceller(Arc::new(AtomicU8::new(NONE)));
    let deadline = Deadline::default();
    on_start(&Started {
        pid,
        pgid: group.id,
        canceller: canceller.clone(),
        deadline: deadline.clone(),
    });

    let streams: [Option<Box<dyn Read + Send>>; 2] = [
        child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
        child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>),
    ];
    let limit = spec.timeout.map(|t| start + t);
    let (status, timed_out, output) = std::thread::scope(|scope| {
        let readers: Vec<_> = streams
            .into_iter()
            .zip([spec.stdout, spec.stderr])
            .map(|(stream, name)| {
                scope.spawn(move || {
                    let mut sink = Sink::new(spec.out_dir, name, spec.output_limit);
                    if let Some(mut stream) = stream {
                        let mut buf = vec![0; 64 * 1024];
                        loop {
                            match stream.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => sink.take(&buf[..n]),
                                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                                // A broken pipe is the end of the stream.
                                Err(_) => break,
                            }
                        }
                    }
                    sink.finish()
                })
            })
            .collect();
        let mut timed_out = false;
        loop {
            // SAFETY: the child's handle, open until `child` drops.
            let waited = unsafe { WaitForSingleObject(child.as_raw_handle(), TICK.as_millis() as u32) };
            if waited == WAIT_OBJECT_0 {
                break;
            }
            let now = Instant::now();
            if !timed_out && limit.is_some_and(|at| now >= at) {
                timed_out = true;
                group.terminate();
            } else if canceller.0.load(Ordering::Relaxed) != NONE || deadline.passed(now) {
                group.terminate();
            }
        }
        let status = child.wait();
        // Whatever the step left in its job dies now, so its pipes close.
        group.terminate();
        let output: Vec<io::Result<()>> = readers
            .into_iter()
            .map(|r| {
                r.join()
                    .unwrap_or_else(|_| Err(io::Error::other("output reader panicked")))
            })
            .collect();
        (status, timed_out, output)
    });
    drop(group);
    let duration_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
    let status = status.map_err(supervise)?;
    for (result, name) in output.into_iter().zip([spec.stdout, spec.stderr]) {
        if let Err(source) = result {
            return Err(StepError::Output {
                path: spec.out_dir.join(name),
                source,
            });
        }
    }
    tracing::debug!(pid, ?status, timed_out, duration_ms, "step ended");
    let killed = status.code().is_some_and(|c| c as u32 == TERMINATED);
    Ok(ProcessOutcome {
        exit_code: if killed { None } else { status.code() },
        signal: killed.then_some(9),
        duration_ms,
        timed_out,
    })
}

/// Resumes every thread of the suspended process `pid` (its one first
/// thread), once it is in its job.
fn resume(pid: u32) -> io::Result<()> {
    use windows_sys::Win32::Foundation::INVALID_HANDLE_VALUE;
    use windows_sys::Win32::System::Diagnostics::ToolHelp::{
        CreateToolhelp32Snapshot, TH32CS_SNAPTHREAD, THREADENTRY32, Thread32First, Thread32Next,
    };
    use windows_sys::Win32::System::Threading::{OpenThread, ResumeThread, THREAD_SUSPEND_RESUME};
    // SAFETY: a snapshot handle we own and close; each thread handle is
    // opened, resumed and closed.
    unsafe {
        let snap = CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0);
        if snap == INVALID_HANDLE_VALUE {
            return Err(io::Error::last_os_error());
        }
        let snap = Handle(snap);
        let mut entry: THREADENTRY32 = std::mem::zeroed();
        entry.dwSize = std::mem::size_of::<THREADENTRY32>() as u32;
        let mut resumed = 0;
        let mut more = Thread32First(snap.0, &raw mut entry) != 0;
        while more {
            if entry.th32OwnerProcessID == pid {
                let thread = OpenThread(THREAD_SUSPEND_RESUME, 0, entry.th32ThreadID);
                if !thread.is_null() {
                    let thread = Handle(thread);
                    if ResumeThread(thread.0) != u32::MAX {
                        resumed += 1;
                    }
                }
            }
            more = Thread32Next(snap.0, &raw mut entry) != 0;
        }
        match resumed {
            0 => Err(io::Error::other(format!("cannot resume process {pid}"))),
            _ => Ok(()),
        }
    }
}
