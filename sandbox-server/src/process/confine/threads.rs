//! The threads that clone commands.
//!
//! Every command is cloned by a *spawner*: a thread of the server that does nothing else. A
//! spawner is where two things are set once instead of in every command:
//!
//! - **One Landlock domain for all commands.** A domain is made by `landlock_restrict_self` and
//!   inherited by what the restricted thread clones. Commands cloned from threads that each
//!   restricted themselves would be in sibling domains, and Landlock's signal scope would then
//!   refuse a command's `kill` of a process an earlier call started. So one *domain thread*
//!   restricts itself once, and starts every spawner: they, and every command, share its domain.
//! - **The PID namespace.** `setns(CLONE_NEWPID)` sets the namespace of what a thread clones
//!   next; a thread that did it can no longer start threads, so each spawner does it itself,
//!   after it started, and only clones commands afterwards.
//!
//! A spawner that must live in cgroups (see `cgroups`) is moved there by the thread that asked
//! for it, by writing its thread id: once in the domain, it could not write there itself.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};

/// Work for a spawner: cloning a command.
pub type Job = Box<dyn FnOnce() + Send>;

type Body = Box<dyn FnOnce() + Send>;
type Started = std::io::Result<std::thread::JoinHandle<()>>;
/// A request to the domain thread: a spawner's body, and where to answer with its handle.
type Request = (Body, mpsc::SyncSender<Started>);

/// Starts spawners: in the commands' domain and PID namespace, where there are such.
#[derive(Debug, Clone)]
pub struct Factory {
    inner: Arc<FactoryInner>,
}

#[derive(Debug)]
struct FactoryInner {
    /// Requests to the domain thread (none without Landlock: spawners start from the caller).
    domain: Mutex<Option<mpsc::Sender<Request>>>,
    /// The commands' PID namespace, for each spawner's children.
    pid_ns: Option<Arc<OwnedFd>>,
}

/// What the domain thread runs once, before it starts any thread: entering the domain.
pub type Restrict = Box<dyn FnOnce() -> std::io::Result<()> + Send>;

impl Factory {
    /// `restrict` makes the domain (none: no Landlock); `pid_ns` is the commands' namespace.
    pub fn new(
        restrict: Option<Restrict>,
        pid_ns: Option<Arc<OwnedFd>>,
    ) -> std::io::Result<Factory> {
        let domain = match restrict {
            Some(restrict) => Some(domain_thread(restrict)?),
            None => None,
        };
        Ok(Factory {
            inner: Arc::new(FactoryInner {
                domain: Mutex::new(domain),
                pid_ns,
            }),
        })
    }

    /// Whether commands are born in the Landlock domain (they must not enter it again).
    pub fn in_domain(&self) -> bool {
        self.inner
            .domain
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_some()
    }

    fn start_thread(&self, body: Body) -> Started {
        let domain = self
            .inner
            .domain
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        match domain {
            Some(requests) => {
                let (reply, answer) = mpsc::sync_channel(1);
                requests
                    .send((body, reply))
                    .map_err(|_| std::io::Error::other("the commands' domain thread ended"))?;
                answer
                    .recv()
                    .map_err(|_| std::io::Error::other("the commands' domain thread ended"))?
            }
            None => spawner_builder().spawn(body),
        }
    }
}

fn spawner_builder() -> std::thread::Builder {
    std::thread::Builder::new().name("spawner".to_owned())
}

/// The thread that enters the domain once and starts the spawners from there.
fn domain_thread(
    restrict: Restrict,
) -> std::io::Result<mpsc::Sender<(Body, mpsc::SyncSender<Started>)>> {
    let (requests, inbox) = mpsc::channel::<Request>();
    let (ready, entered) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("commands-domain".to_owned())
        .spawn(move || {
            let done = restrict();
            let ok = done.is_ok();
            let _ = ready.send(done);
            if ok {
                while let Ok((body, reply)) = inbox.recv() {
                    let _ = reply.send(spawner_builder().spawn(body));
                }
            }
        })?;
    entered
        .recv()
        .map_err(|_| std::io::Error::other("the commands' domain thread ended"))??;
    Ok(requests)
}

/// A thread that clones commands: the jobs sent to it run there.
#[derive(Debug)]
pub struct Spawner {
    jobs: Option<mpsc::Sender<Job>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Spawner {
    /// Starts a spawner; when `cgroups` names groups' folders, it is moved into them (a write of
    /// its thread id to each `tasks`) before it takes a job.
    pub fn start(factory: &Factory, cgroups: &[PathBuf]) -> std::io::Result<Spawner> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (tid_tx, tid_rx) = mpsc::sync_channel::<i32>(1);
        let (go_tx, go_rx) = mpsc::sync_channel::<bool>(1);
        let (ready_tx, ready_rx) = mpsc::sync_channel::<std::io::Result<()>>(1);
        let pid_ns = factory.inner.pid_ns.clone();
        let handle = factory.start_thread(Box::new(move || {
            let _ = tid_tx.send(nix::unistd::gettid().as_raw());
            if !matches!(go_rx.recv(), Ok(true)) {
                return;
            }
            let entered = match &pid_ns {
                Some(ns) => super::namespaces::set_children_namespace(ns.as_raw_fd()),
                None => Ok(()),
            };
            let ok = entered.is_ok();
            let _ = ready_tx.send(entered);
            if ok {
                while let Ok(job) = inbox.recv() {
                    job();
                }
            }
        }))?;
        let mut spawner = Spawner {
            jobs: Some(jobs),
            handle: Some(handle),
        };
        let placed = tid_rx
            .recv()
            .map_err(|_| std::io::Error::other("the spawner ended"))
            .and_then(|tid| {
                cgroups
                    .iter()
                    .try_for_each(|dir| std::fs::write(dir.join("tasks"), tid.to_string()))
            });
        let _ = go_tx.send(placed.is_ok());
        let ready = placed.and_then(|()| {
            ready_rx
                .recv()
                .map_err(|_| std::io::Error::other("the spawner ended"))?
        });
        if let Err(err) = ready {
            spawner.stop();
            return Err(err);
        }
        Ok(spawner)
    }

    /// Whether the thread still takes jobs (a panic in one ends it).
    pub fn alive(&self) -> bool {
        self.jobs.is_some() && self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }

    pub fn run(&self, job: Job) -> std::io::Result<()> {
        self.jobs
            .as_ref()
            .ok_or_else(|| std::io::Error::other("the spawner was stopped"))?
            .send(job)
            .map_err(|_| std::io::Error::other("the spawner ended"))
    }

    /// Ends the thread (which leaves its groups) and waits for it.
    pub fn stop(&mut self) {
        self.jobs.take();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}
