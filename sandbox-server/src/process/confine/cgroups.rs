//! Per-command cgroups (v1 `pids` and `memory` hierarchies, where this process may create
//! child groups): a process count and a memory limit that bind the command's whole tree, root
//! included, and a membership list that finds every process of a call. On cgroup v2, which
//! needs a delegated subtree, the server reports that it uses resource limits alone.
//!
//! A command is born in its group rather than moved there. Moving a process takes the kernel's
//! `cgroup_threadgroup_rwsem` for writing, which waits for an RCU grace period whenever the lock
//! was idle: 8–20 ms for every command that follows a pause, which is every command of an agent
//! that thinks between them. In cgroup v1 a thread can sit in a group of its own, so each group
//! has a thread of the server in it (moved there once, in the background), and the call's
//! command is cloned from that thread (a spawner, see `threads`). The thread counts as one task in the group: `pids.max`
//! is the limit plus one, and it is never listed as a member.
//!
//! Groups are reused: a call's group, once empty, goes back to a small pool with its limits and
//! its thread, and one spare is kept ready ahead of need, so a call makes no `mkdir`, limit
//! write, move or `rmdir`.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use sandbox_protocol::{Protection, ProtectionName};

use super::{Rlimits, protection, show, show_bytes};

/// Per-command groups where this process may create them, and the protection.
pub fn prepare(
    limits: Rlimits,
    spawners: super::threads::Factory,
) -> (Option<Cgroups>, Protection) {
    match Cgroups::probe(limits, spawners) {
        Ok(cgroups) => {
            let detail = format!(
                "each command gets its own group ({}): processes {}, memory {} for its whole tree, root included",
                cgroups.describe(),
                show(limits.processes),
                show_bytes(limits.memory_bytes)
            );
            cgroups.keep_a_spare();
            (
                Some(cgroups),
                protection(ProtectionName::Cgroup, true, detail),
            )
        }
        Err(why) => (None, protection(ProtectionName::Cgroup, false, why)),
    }
}

pub use super::threads::Job;

/// Where per-command groups are created; cheap to clone (one pool).
#[derive(Debug, Clone)]
pub struct Cgroups {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pids: Option<PathBuf>,
    memory: Option<PathBuf>,
    /// `sandbox-<server pid>-<start ticks>-`: other servers on the same host share the parent
    /// folders, so each names (and sweeps) only its own groups.
    prefix: String,
    limits: Rlimits,
    /// Starts each group's thread, in the commands' Landlock domain and PID namespace.
    spawners: super::threads::Factory,
    /// Numbers the groups: `<prefix>g<n>`.
    made: AtomicU64,
    /// Empty groups ready for the next call, at most [`POOL`].
    pool: Mutex<Vec<CallGroup>>,
    /// Whether a spare is being made in the background.
    making: std::sync::atomic::AtomicBool,
    /// Set by [`Cgroups::sweep`] at shutdown: no group is made or kept after it.
    closed: std::sync::atomic::AtomicBool,
}

/// A group whose memory group is still charged with more than this after its processes ended
/// (files on a tmpfs, `/dev/shm`, kernel memory) is removed, not reused: reused, the charge
/// would count against the next command's limit.
const REUSE_MAX_CHARGE: u64 = 64 * 1024 * 1024;

/// The most empty groups kept for reuse.
const POOL: usize = 16;

/// One command's groups and the thread of the server that lives in them.
#[derive(Debug)]
pub struct CallGroup {
    pub dirs: Vec<PathBuf>,
    thread: Option<super::threads::Spawner>,
    /// Whether the thread is in the commands' Landlock domain.
    restricted: bool,
}

const PREFIX: &str = "sandbox-";

/// Where this process's groups of `controller` are (from `/proc/self/cgroup`'s text).
fn base(own: &str, controller: &str) -> Option<PathBuf> {
    let relative = own.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| c == controller)
            .then(|| path.trim_start_matches('/').to_owned())
    })?;
    Some(Path::new("/sys/fs/cgroup").join(controller).join(relative))
}

/// Kills the members of every `sandbox-…` group beside this process's whose name `owned`
/// accepts, then removes the group; returns how many processes were killed.
pub fn sweep_server(owned: &dyn Fn(&str) -> bool) -> usize {
    let Ok(own) = fs::read_to_string("/proc/self/cgroup") else {
        return 0;
    };
    let mut killed = 0;
    for controller in ["pids", "memory"] {
        let Some(dir) = base(&own, controller) else {
            continue;
        };
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with(PREFIX) || !owned(&name) {
                continue;
            }
            let group = CallGroup {
                dirs: vec![entry.path()],
                thread: None,
                restricted: false,
            };
            for pid in group.members() {
                let pid = nix::unistd::Pid::from_raw(pid as i32);
                if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).is_ok() {
                    killed += 1;
                }
            }
            // The group empties once the kernel has finished the kills.
            for _ in 0..50 {
                if fs::remove_dir(entry.path()).is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
    killed
}

impl Cgroups {
    /// The hierarchies this process may create groups in; an explanation when there are none.
    fn probe(limits: Rlimits, spawners: super::threads::Factory) -> Result<Cgroups, String> {
        if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            return Err("cgroup v2: per-command groups need a delegated subtree, which this server does not set up; resource limits apply per process".to_owned());
        }
        let own = fs::read_to_string("/proc/self/cgroup")
            .map_err(|err| format!("reading /proc/self/cgroup: {err}"))?;
        let place = |controller: &str| -> Option<PathBuf> {
            let dir = base(&own, controller)?;
            let probe = dir.join(format!("{PREFIX}{}-probe", std::process::id()));
            fs::create_dir(&probe).ok()?;
            let _ = fs::remove_dir(&probe);
            Some(dir)
        };
        let (pids, memory) = (place("pids"), place("memory"));
        if pids.is_none() && memory.is_none() {
            return Err("no writable cgroup (v1 pids or memory) for per-command groups; resource limits apply per process".to_owned());
        }
        Ok(Cgroups {
            inner: Arc::new(Inner {
                pids,
                memory,
                prefix: format!("{PREFIX}{}-", crate::process::ServerId::current()),
                limits,
                spawners,
                made: AtomicU64::new(0),
                pool: Mutex::new(Vec::new()),
                making: std::sync::atomic::AtomicBool::new(false),
                closed: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(dir) = &self.inner.pids {
            parts.push(format!("pids under {}", dir.display()));
        }
        if let Some(dir) = &self.inner.memory {
            parts.push(format!("memory under {}", dir.display()));
        }
        parts.join(", ")
    }

    fn pool(&self) -> MutexGuard<'_, Vec<CallGroup>> {
        self.inner.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An empty group for a call: a ready one from the pool, or a new one. Either way a spare
    /// is then made in the background if the pool is empty.
    pub fn take(&self) -> std::io::Result<CallGroup> {
        let group = loop {
            let taken = self.pool().pop();
            match taken {
                Some(group) if group.alive() => break group,
                Some(dead) => dead.remove(),
                None => break self.create()?,
            }
        };
        self.keep_a_spare();
        Ok(group)
    }

    /// Makes a group in the background when the pool is empty and none is being made.
    fn keep_a_spare(&self) {
        if !self.pool().is_empty() || self.inner.making.swap(true, Ordering::AcqRel) {
            return;
        }
        let cgroups = self.clone();
        let made = std::thread::Builder::new()
            .name("cgroup-spare".to_owned())
            .spawn(move || {
                match cgroups.create() {
                    Ok(group) => cgroups.shelve_spare(group),
                    Err(_) if cgroups.closed() => {}
                    Err(err) => tracing::warn!(cause = %err, "making a spare cgroup"),
                }
                cgroups.inner.making.store(false, Ordering::Release);
            });
        if made.is_err() {
            self.inner.making.store(false, Ordering::Release);
        }
    }

    /// Gives back a call's group: kept for reuse when empty and the pool has room, removed when
    /// empty otherwise; a group with live processes is handed back to the caller.
    pub fn give_back(&self, group: CallGroup) -> Option<CallGroup> {
        if !group.is_empty() {
            return Some(group);
        }
        let reusable = group.alive() && group.charge() <= REUSE_MAX_CHARGE && !self.closed();
        let mut pool = self.pool();
        if reusable && pool.len() < POOL {
            pool.push(group);
        } else {
            drop(pool);
            group.remove();
        }
        None
    }

    /// Puts a new group at the bottom of the pool: groups given back are taken first, so the
    /// same few are reused and a spare waits for when they are all busy.
    fn shelve_spare(&self, group: CallGroup) {
        let mut pool = self.pool();
        if pool.len() < POOL && !self.closed() {
            pool.insert(0, group);
        } else {
            drop(pool);
            group.remove();
        }
    }

    fn closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// A new group with its limits (0: no limit; the thread takes one task) and its thread.
    fn create(&self) -> std::io::Result<CallGroup> {
        let mut group = CallGroup {
            dirs: Vec::new(),
            thread: None,
            restricted: self.inner.spawners.in_domain(),
        };
        let number = self.inner.made.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}g{number}", self.inner.prefix);
        let limits = self.inner.limits;
        let processes = if limits.processes > 0 {
            limits.processes + 1
        } else {
            0
        };
        for (base, file, limit) in [
            (&self.inner.pids, "pids.max", processes),
            (
                &self.inner.memory,
                "memory.limit_in_bytes",
                limits.memory_bytes,
            ),
        ] {
            let Some(base) = base else { continue };
            let dir = base.join(&name);
            if let Err(err) = fs::create_dir(&dir) {
                group.remove();
                return Err(err);
            }
            group.dirs.push(dir.clone());
            if limit > 0
                && let Err(err) = fs::write(dir.join(file), limit.to_string())
            {
                group.remove();
                return Err(err);
            }
        }
        match super::threads::Spawner::start(&self.inner.spawners, &group.dirs) {
            Ok(thread) => group.thread = Some(thread),
            Err(err) => {
                group.remove();
                return Err(err);
            }
        }
        Ok(group)
    }

    /// Removes this server's groups: the pooled ones, then every empty one left. No group is
    /// made or pooled after it.
    pub fn sweep(&self) {
        self.inner.closed.store(true, Ordering::Release);
        let pooled: Vec<CallGroup> = self.pool().drain(..).collect();
        pooled.into_iter().for_each(CallGroup::remove);
        for base in [&self.inner.pids, &self.inner.memory].into_iter().flatten() {
            let Ok(entries) = fs::read_dir(base) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(&self.inner.prefix)
                {
                    let _ = fs::remove_dir(entry.path());
                }
            }
        }
    }
}

impl CallGroup {
    /// Runs `job` on the group's thread, so that what it clones is born in the group.
    pub fn run(&self, job: Job) -> std::io::Result<()> {
        match &self.thread {
            Some(thread) => thread.run(job),
            None => Err(std::io::Error::other("the group has no thread")),
        }
    }

    /// Whether what the group's thread clones is already in the commands' Landlock domain.
    pub fn restricted(&self) -> bool {
        self.restricted
    }

    /// Whether the group's thread still takes jobs.
    fn alive(&self) -> bool {
        self.thread
            .as_ref()
            .is_some_and(super::threads::Spawner::alive)
    }

    /// Whether no process is in the groups; a group that cannot be read counts as busy.
    fn is_empty(&self) -> bool {
        let own = std::process::id().to_string();
        self.dirs.iter().all(|dir| {
            fs::read_to_string(dir.join("cgroup.procs"))
                .is_ok_and(|text| text.split_whitespace().all(|pid| pid == own))
        })
    }

    /// What the memory group is still charged with (0 without one).
    fn charge(&self) -> u64 {
        self.dirs
            .iter()
            .filter_map(|dir| fs::read_to_string(dir.join("memory.usage_in_bytes")).ok())
            .filter_map(|text| text.trim().parse::<u64>().ok())
            .sum()
    }

    /// The pids in the call's groups (the server's own, there by its thread, left out).
    pub fn members(&self) -> Vec<u32> {
        let own = std::process::id();
        let mut pids: Vec<u32> = self
            .dirs
            .iter()
            .filter_map(|dir| fs::read_to_string(dir.join("cgroup.procs")).ok())
            .flat_map(|text| {
                text.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .filter(|&pid| pid != own)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Stops the group's thread and removes the groups (if they are empty: background processes
    /// keep them). A thread that just ended may take a moment to leave: bounded retries.
    pub fn remove(mut self) {
        if let Some(mut thread) = self.thread.take() {
            thread.stop();
        }
        for dir in &self.dirs {
            for _ in 0..20 {
                match fs::remove_dir(dir) {
                    Err(err) if err.raw_os_error() == Some(nix::libc::EBUSY) => {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    _ => break,
                }
            }
        }
    }
}
