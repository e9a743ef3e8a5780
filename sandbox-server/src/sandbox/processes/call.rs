//! A `bash` tool call as a process of the table, under its call id: the call's own task reads
//! the command's pipes and mirrors each read here, so that anyone can follow the call's output
//! while it runs (`GET /v1/processes/{call_id}/events`), signal it, or delete it.
//!
//! *Invariant*: the call stays the owner of its command (its capture, artifacts, timeout and
//! result); this entry only copies what it reads and, at the end, how it ended. At most
//! `ENDED_CALLS_KEPT` ended calls are kept, so old calls cost no memory.

use super::*;

impl ProcessTable {
    /// Refuses a call id that already names a process (before the call starts anything).
    pub fn check_call_id(&self, call_id: &str) -> Result<(), ManagedError> {
        if self.contains(call_id) {
            return Err(ManagedError::Conflict(format!(
                "call id `{call_id}` already names a process (GET /v1/processes/{call_id}); choose another"
            )));
        }
        Ok(())
    }

    /// Enters a running call; `None` (the call runs unfollowed) when its id is not a process
    /// id, was taken meanwhile, or the table is full of running processes.
    pub fn open_call(
        &self,
        call_id: &str,
        cmd: &str,
        pid: u32,
        request: serde_json::Value,
    ) -> Option<Arc<Managed>> {
        check_id(call_id).ok()?;
        let mut processes = lock(&self.inner.processes);
        forget_old_calls(&mut processes);
        if processes.contains_key(call_id) || self.make_room(&mut processes).is_err() {
            tracing::debug!(
                call_id,
                "the call is not followable (id taken or table full)"
            );
            return None;
        }
        let spec = Spec {
            id: call_id,
            kind: ProcessKind::Call,
            cmd,
            args: &[],
            cwd: None,
            env: Vec::new(),
            io: Io::Null,
            tty: None,
            timeout: None,
            request,
        };
        let managed = Arc::new(Managed::new(
            &spec,
            call_id.to_owned(),
            pid,
            Input::Pipe(None),
            self,
        ));
        processes.insert(call_id.to_owned(), managed.clone());
        Some(managed)
    }
}

/// Ended calls kept for late readers; older ones are forgotten as new calls come (their
/// artifacts stay), so their buffers hold at most this many times `--process-buffer`.
const ENDED_CALLS_KEPT: usize = 32;

fn forget_old_calls(processes: &mut HashMap<String, Arc<Managed>>) {
    let mut ended: Vec<(u64, String)> = processes
        .values()
        .filter(|p| p.kind == ProcessKind::Call && p.is_done())
        .map(|p| (p.order, p.id.clone()))
        .collect();
    if ended.len() < ENDED_CALLS_KEPT {
        return;
    }
    ended.sort_unstable();
    for (_, id) in &ended[..=ended.len() - ENDED_CALLS_KEPT] {
        processes.remove(id);
    }
}

impl Managed {
    /// A read of the call's command, copied to the buffer.
    pub fn mirror(&self, stream: OutputStream, bytes: &[u8]) {
        self.push(stream, bytes);
    }

    /// How the call ended, with its artifacts.
    pub fn finish_call(&self, exit: ExitStatus, timed_out: bool, artifacts: Vec<StreamArtifact>) {
        self.flush(OutputStream::Stdout);
        self.flush(OutputStream::Stderr);
        {
            let mut live = lock(&self.live);
            live.state = match live.ending {
                Some(ending) => ending,
                None if timed_out => ProcessState::TimedOut,
                None => ProcessState::Exited,
            };
            live.exit = Some(exit);
            live.ended_at = Some(SystemTime::now());
            live.output_closed = true;
            live.artifacts = artifacts;
        }
        self.bump();
    }
}
