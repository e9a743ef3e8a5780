//! Per-command cgroups (v1 `pids` and `memory` hierarchies, where this process may create
//! child groups): a process count and a memory limit that bind the command's whole tree, root
//! included, and a membership list that finds every process of a call. On cgroup v2, which
//! needs a delegated subtree, the server reports that it uses resource limits alone.
//!
//! Groups are reused: a call's group, once empty, goes back to a small pool with its limits
//! and its open `cgroup.procs`, so most calls make no `mkdir`, limit writes or `rmdir` (about a
//! third of a millisecond per call, more when the kernel is busy freeing memory groups).

#![allow(unsafe_code)] // joining a group between the clone and the exec: getpid and write

use std::fs;
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::libc;
use sandbox_protocol::{Protection, ProtectionName};

use super::{Rlimits, protection, show, show_bytes};

/// Per-command groups where this process may create them, and the protection.
pub fn prepare(limits: Rlimits) -> (Option<Cgroups>, Protection) {
    match Cgroups::probe() {
        Ok(cgroups) => {
            let detail = format!(
                "each command gets its own group ({}): processes {}, memory {} for its whole tree, root included",
                cgroups.describe(),
                show(limits.processes),
                show_bytes(limits.memory_bytes)
            );
            (
                Some(cgroups),
                protection(ProtectionName::Cgroup, true, detail),
            )
        }
        Err(why) => (None, protection(ProtectionName::Cgroup, false, why)),
    }
}

/// In the child, first (while still privileged): writes its pid, formatted on the stack, to
/// each group's `cgroup.procs`.
pub fn join_in_child(procs: &[RawFd]) -> std::io::Result<()> {
    if procs.is_empty() {
        return Ok(());
    }
    let mut digits = [0u8; 12];
    let mut at = digits.len();
    // SAFETY: getpid has no arguments and cannot fail.
    let mut pid = unsafe { libc::getpid() } as u32;
    loop {
        at -= 1;
        digits[at] = b'0' + (pid % 10) as u8;
        pid /= 10;
        if pid == 0 {
            break;
        }
    }
    for &fd in procs {
        // SAFETY: writes bytes from our stack to a descriptor opened before the clone.
        let written = unsafe { libc::write(fd, digits[at..].as_ptr().cast(), digits.len() - at) };
        if written < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Where per-command groups are created.
#[derive(Debug)]
pub struct Cgroups {
    pids: Option<PathBuf>,
    memory: Option<PathBuf>,
    /// `sandbox-<server pid>-<start ticks>-`: other servers on the same host share the parent
    /// folders, so each names (and sweeps) only its own groups.
    prefix: String,
    /// Numbers the groups: `<prefix>g<n>`.
    made: std::sync::atomic::AtomicU64,
    /// Empty groups ready for the next call, at most [`POOL`].
    pool: std::sync::Mutex<Vec<CallGroup>>,
}

/// The most empty groups kept for reuse.
const POOL: usize = 16;

/// One command's groups: the folders, and `cgroup.procs` opened for the child to join.
#[derive(Debug)]
pub struct CallGroup {
    pub dirs: Vec<PathBuf>,
    pub procs: Vec<OwnedFd>,
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
                procs: Vec::new(),
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
    pub fn probe() -> Result<Cgroups, String> {
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
        let prefix = format!("{PREFIX}{}-", crate::process::ServerId::current());
        let cgroups = Cgroups {
            pids: place("pids"),
            memory: place("memory"),
            prefix,
            made: std::sync::atomic::AtomicU64::new(0),
            pool: std::sync::Mutex::new(Vec::new()),
        };
        if cgroups.pids.is_none() && cgroups.memory.is_none() {
            return Err("no writable cgroup (v1 pids or memory) for per-command groups; resource limits apply per process".to_owned());
        }
        Ok(cgroups)
    }

    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(dir) = &self.pids {
            parts.push(format!("pids under {}", dir.display()));
        }
        if let Some(dir) = &self.memory {
            parts.push(format!("memory under {}", dir.display()));
        }
        parts.join(", ")
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Vec<CallGroup>> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An empty group for a call: one from the pool, or a new one with its limits (0: no
    /// limit), its `cgroup.procs` open.
    pub fn take(&self, processes: u64, memory_bytes: u64) -> std::io::Result<CallGroup> {
        if let Some(group) = self.pool().pop() {
            return Ok(group);
        }
        self.create(processes, memory_bytes)
    }

    /// Gives back a call's group: kept for reuse when empty and the pool has room, removed when
    /// empty otherwise; a group with live processes is handed back to the caller.
    pub fn give_back(&self, group: CallGroup) -> Option<CallGroup> {
        if !group.members().is_empty() {
            return Some(group);
        }
        let mut pool = self.pool();
        if pool.len() < POOL {
            pool.push(group);
        } else {
            drop(pool);
            group.remove();
        }
        None
    }

    fn create(&self, processes: u64, memory_bytes: u64) -> std::io::Result<CallGroup> {
        let mut group = CallGroup {
            dirs: Vec::new(),
            procs: Vec::new(),
        };
        let number = self.made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("{}g{number}", self.prefix);
        for (base, file, limit) in [
            (&self.pids, "pids.max", processes),
            (&self.memory, "memory.limit_in_bytes", memory_bytes),
        ] {
            let Some(base) = base else { continue };
            let dir = base.join(&name);
            fs::create_dir(&dir)?;
            group.dirs.push(dir.clone());
            if limit > 0 {
                fs::write(dir.join(file), limit.to_string())?;
            }
            let procs = fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))?;
            group.procs.push(OwnedFd::from(procs));
        }
        Ok(group)
    }

    /// Removes this server's empty call groups (those whose processes have all ended), the
    /// pooled ones included.
    pub fn sweep(&self) {
        self.pool().clear();
        for base in [&self.pids, &self.memory].into_iter().flatten() {
            let Ok(entries) = fs::read_dir(base) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(&self.prefix)
                {
                    let _ = fs::remove_dir(entry.path());
                }
            }
        }
    }
}

impl CallGroup {
    /// The pids in the call's groups.
    pub fn members(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .dirs
            .iter()
            .filter_map(|dir| fs::read_to_string(dir.join("cgroup.procs")).ok())
            .flat_map(|text| {
                text.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Removes the groups if they are empty (background processes keep them until they end).
    pub fn remove(&self) {
        for dir in &self.dirs {
            let _ = fs::remove_dir(dir);
        }
    }
}
