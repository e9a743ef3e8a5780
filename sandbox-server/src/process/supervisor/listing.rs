//! What the supervisor tells of the processes it started: the list, and their pids as
//! commands see them (the numbering of their PID namespace, which the API speaks).

use super::{CALL_ID_ENV, ProcEntry, Supervisor, proc_fs};

impl Supervisor {
    /// The live processes this server started, with their call markers.
    pub fn live_processes(&self) -> Vec<(ProcEntry, Option<String>)> {
        let mut found: Vec<(ProcEntry, Option<String>)> = self
            .commands_tree()
            .into_values()
            .filter(|entry| !entry.is_zombie())
            .map(|entry| {
                let marker = proc_fs::call_marker(entry.pid, CALL_ID_ENV);
                (entry, marker)
            })
            .collect();
        found.sort_by_key(|(entry, _)| entry.pid);
        found
    }

    /// The pid commands see for the process `host` (in their PID namespace; 0 for a process
    /// outside it, such as the server), or `host` itself when they have no namespace of their
    /// own. Every pid the API shows is in this numbering. Blocking: reads `/proc`.
    pub fn public_pid(&self, host: u32) -> u32 {
        if !self.inner.confinement.pid_namespace() {
            return host;
        }
        match proc_fs::innermost_pid(host) {
            Some((inner, depth)) if depth > 1 => inner,
            _ => 0,
        }
    }

    /// The host pid of the live process of this server's tree that commands see as `public`.
    /// Blocking: reads `/proc`.
    pub fn host_pid(&self, public: u32) -> Option<u32> {
        if !self.inner.confinement.pid_namespace() {
            return Some(public);
        }
        self.commands_tree()
            .into_keys()
            .find(|&host| self.public_pid(host) == public)
    }

    /// The host pids of the live processes this server started (the fingerprint reads their
    /// descriptors). Blocking: reads `/proc`.
    pub fn live_host_pids(&self) -> Vec<u32> {
        self.live_processes()
            .into_iter()
            .map(|(entry, _)| entry.pid)
            .collect()
    }

    /// The live processes, as the wire describes them (pids as commands see them). Blocking:
    /// reads `/proc`.
    pub fn process_infos(&self) -> Vec<sandbox_protocol::ProcessInfo> {
        self.live_processes()
            .into_iter()
            .map(|(entry, call_id)| sandbox_protocol::ProcessInfo {
                pid: self.public_pid(entry.pid),
                ppid: self.public_pid(entry.ppid),
                pgid: self.public_pid(entry.pgid),
                command: proc_fs::command_line(entry.pid),
                started_at: proc_fs::start_time_unix(entry.start_ticks)
                    .map(crate::time::rfc3339)
                    .unwrap_or_default(),
                foreground: call_id
                    .as_deref()
                    .is_some_and(|id| self.is_call_running(id)),
                call_id,
            })
            .collect()
    }

    /// Live processes of a call other than the shell itself, after the shell has exited (host
    /// pids).
    pub fn call_processes(&self, call_id: &str) -> Vec<u32> {
        self.live_processes()
            .into_iter()
            .filter(|(_, marker)| marker.as_deref() == Some(call_id))
            .map(|(entry, _)| entry.pid)
            .collect()
    }
}
