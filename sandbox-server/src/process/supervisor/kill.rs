//! Killing: a call's processes, a tree, the background, everything at shutdown; each with a
//! grace between SIGTERM and SIGKILL, reported.

use std::collections::{HashMap, HashSet};
use std::io;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::time::Instant;

use super::super::proc_fs::{self, ProcEntry};
use super::super::{CALL_ID_ENV, ProcessError};
use super::{KillReport, Supervisor, lock};

impl Supervisor {
    /// Kills everything a call started: the shell's descendants, its process group and
    /// every process carrying the call's marker.
    pub async fn kill_call(&self, shell_pid: u32, call_id: &str, grace: Duration) -> KillReport {
        let call_id = call_id.to_owned();
        let supervisor = self.clone();
        self.terminate(grace, move |table, ours| {
            let mut targets: HashSet<u32> =
                proc_fs::descendants(table, shell_pid).into_iter().collect();
            targets.insert(shell_pid);
            // The cgroup holds every process of the call, whatever it did to its environment.
            targets.extend(supervisor.group_members(&call_id));
            for &pid in ours {
                let Some(entry) = table.get(&pid) else {
                    continue;
                };
                if entry.pgid == shell_pid
                    || proc_fs::call_marker(pid, CALL_ID_ENV).as_deref() == Some(call_id.as_str())
                {
                    targets.insert(pid);
                }
            }
            targets
        })
        .await
    }

    /// Kills one process that this server started, and its descendants.
    pub async fn kill_tree(&self, pid: u32, grace: Duration) -> Result<KillReport, ProcessError> {
        let ours = self.commands_tree();
        if ours.get(&pid).is_none_or(ProcEntry::is_zombie) {
            return Err(ProcessError::NotOurs(pid));
        }
        Ok(self
            .terminate(grace, move |table, _| {
                let mut targets: HashSet<u32> =
                    proc_fs::descendants(table, pid).into_iter().collect();
                targets.insert(pid);
                targets
            })
            .await)
    }

    /// Sends `signal` to a process group of this server's tree (a managed process's own, or
    /// its terminal's foreground group); a group with none of its processes is refused.
    pub fn signal_group(&self, pgid: i32, signal: Signal) -> io::Result<()> {
        let ours = self
            .commands_tree()
            .values()
            .any(|entry| !entry.is_zombie() && entry.pgid as i32 == pgid);
        if !ours {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("process group {pgid} has no live process of this server"),
            ));
        }
        nix::sys::signal::killpg(Pid::from_raw(pgid), signal).map_err(io::Error::from)
    }

    /// Kills the descendants of `pid`, which lives on (a shell whose command ignored Ctrl-C).
    pub async fn kill_descendants(&self, pid: u32, grace: Duration) -> KillReport {
        self.terminate(grace, move |table, _| {
            proc_fs::descendants(table, pid).into_iter().collect()
        })
        .await
    }

    /// Marks the process `pid` (the image's own entrypoint) and its descendants as the task's:
    /// [`Supervisor::kill_background`] and [`Supervisor::kill_unprotected`] leave them. The
    /// mark is for that process only (its start time is kept): another under its number is not.
    pub fn protect(&self, pid: u32) {
        *lock(&self.inner.protected) = proc_fs::read_stat(pid);
    }

    /// The protected process and its descendants, when it still runs.
    fn protected_tree(&self, table: &HashMap<u32, ProcEntry>) -> HashSet<u32> {
        let Some(root) = lock(&self.inner.protected).clone() else {
            return HashSet::new();
        };
        match table.get(&root.pid) {
            Some(entry) if entry.start_ticks == root.start_ticks && !entry.is_zombie() => {
                let mut tree: HashSet<u32> =
                    proc_fs::descendants(table, root.pid).into_iter().collect();
                tree.insert(root.pid);
                tree
            }
            _ => HashSet::new(),
        }
    }

    /// Kills every process that no running call owns (the background ones) but the protected
    /// entrypoint's, round after round until none is left, so even a fork bomb ends.
    pub async fn kill_background(&self, grace: Duration) -> KillReport {
        let running = lock(&self.inner.running_calls).clone();
        self.terminate(grace, move |table, ours| {
            let protected = self.protected_tree(table);
            ours.iter()
                .copied()
                .filter(|pid| table.contains_key(pid) && !protected.contains(pid))
                .filter(|pid| {
                    !proc_fs::call_marker(*pid, CALL_ID_ENV).is_some_and(|id| running.contains(&id))
                })
                .collect()
        })
        .await
    }

    /// Kills every process but the protected entrypoint's, those of running calls too (their
    /// calls end as killed): what a benchmark does between its agent and its verifier.
    pub async fn kill_unprotected(&self, grace: Duration) -> KillReport {
        self.terminate(grace, move |table, ours| {
            let protected = self.protected_tree(table);
            ours.iter()
                .copied()
                .filter(|pid| !protected.contains(pid))
                .collect()
        })
        .await
    }

    /// Kills every process this server started; their cgroups go back to the pool.
    pub async fn kill_all(&self, grace: Duration) -> KillReport {
        let report = self
            .terminate(grace, |_, ours| ours.iter().copied().collect())
            .await;
        self.remove_empty_groups();
        report
    }

    /// At shutdown: kills every process, then removes this server's cgroups; none is made after.
    pub async fn shut_down(&self, grace: Duration) -> KillReport {
        let report = self.kill_all(grace).await;
        if let Some(cgroups) = self.inner.confinement.cgroups.clone() {
            // Not `sandbox::blocking` (the tools' helper, a layer above): a sweep that failed
            // leaves its groups to the janitor, which sweeps after the server has ended.
            let _ = tokio::task::spawn_blocking(move || cgroups.sweep()).await;
        }
        report
    }

    /// SIGTERM to every target, then SIGKILL to whatever is left after `grace`. Targets are
    /// recomputed on every round, so processes forked meanwhile are caught, and limited to
    /// this server's live descendants, so nothing else is ever signalled.
    async fn terminate(
        &self,
        grace: Duration,
        select: impl Fn(&HashMap<u32, ProcEntry>, &HashSet<u32>) -> HashSet<u32>,
    ) -> KillReport {
        let mut report = KillReport::default();
        let mut signalled = HashSet::new();
        let deadline = Instant::now() + grace;
        let mut signal = Signal::SIGTERM;
        // Bounded: the grace period, then at most 100 SIGKILL rounds of 10 ms.
        for round in 0.. {
            // Only this server's own tree: nothing outside it is ever signalled.
            let table = self.commands_tree();
            let ours: HashSet<u32> = table
                .values()
                .filter(|entry| !entry.is_zombie())
                .map(|entry| entry.pid)
                .collect();
            let mut targets: Vec<u32> = select(&table, &ours)
                .into_iter()
                .filter(|pid| ours.contains(pid))
                .collect();
            targets.sort_unstable();
            if targets.is_empty() {
                break;
            }
            if signal == Signal::SIGTERM && Instant::now() >= deadline {
                signal = Signal::SIGKILL;
                report.forced = true;
            }
            for &pid in &targets {
                let first_time = signalled.insert(pid);
                if first_time {
                    // Read before the signal: a dead process has no number left to read.
                    report.killed.push(self.public_pid(pid));
                    report.commands.push(proc_fs::command_line(pid));
                }
                if signal == Signal::SIGKILL || first_time {
                    let _ = kill(Pid::from_raw(pid as i32), signal);
                    // A stopped process handles SIGTERM only once continued.
                    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGCONT);
                }
            }
            if signal == Signal::SIGKILL && round > 1000 {
                tracing::warn!(remaining = ?targets, "processes survived SIGKILL");
                break;
            }
            let pause = if signal == Signal::SIGKILL { 10 } else { 20 };
            tokio::time::sleep(Duration::from_millis(pause)).await;
            self.reap();
        }
        let mut pairs: Vec<(u32, String)> =
            report.killed.into_iter().zip(report.commands).collect();
        pairs.sort_unstable();
        (report.killed, report.commands) = pairs.into_iter().unzip();
        report
    }
}
