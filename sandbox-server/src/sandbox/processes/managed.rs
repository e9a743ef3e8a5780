//! A managed process's public side: its description, reads of its buffer, input, signals,
//! resizes and kills.

use super::*;

impl Managed {
    pub(super) fn new(
        spec: &Spec<'_>,
        marker: String,
        pid: u32,
        input: Input,
        table: &ProcessTable,
    ) -> Managed {
        let master = match &input {
            Input::Terminal(master) => Some(master.clone()),
            Input::Pipe(_) | Input::Shell(_) => None,
        };
        let (changed, _) = watch::channel(0);
        Managed {
            id: spec.id.to_owned(),
            kind: spec.kind,
            cmd: spec.cmd.to_owned(),
            request: spec.request.clone(),
            tty: spec.tty,
            pid,
            public_pid: table.inner.supervisor.public_pid(pid),
            marker,
            started_at: SystemTime::now(),
            order: table.inner.started.fetch_add(1, Ordering::Relaxed),
            live: Mutex::new(Live {
                ring: Ring::new(table.inner.limits.buffer_bytes),
                carry: Default::default(),
                state: ProcessState::Running,
                ending: None,
                exit: None,
                ended_at: None,
                output_closed: false,
                stdin_open: spec.kind == ProcessKind::Command,
                captures: Default::default(),
                artifacts: Vec::new(),
            }),
            changed,
            input: tokio::sync::Mutex::new(input),
            master,
            shell: (spec.kind == ProcessKind::Shell).then(shell::ShellState::default),
            artifacts: table.inner.artifacts.clone(),
            workspace_root: table.inner.workspace.root().to_owned(),
            model_seen: AtomicU64::new(0),
            supervisor: table.inner.supervisor.clone(),
        }
    }

    /// The folder its `bash` is in: relative to the workspace root when inside it, absolute
    /// otherwise; `None` when it cannot be read. Blocking (a `/proc` link), and cheap.
    fn cwd(&self) -> Option<String> {
        let folder = std::fs::read_link(format!("/proc/{}/cwd", self.pid)).ok()?;
        match folder.strip_prefix(&self.workspace_root) {
            Ok(inside) if inside.as_os_str().is_empty() => Some(".".to_owned()),
            Ok(inside) => Some(inside.to_string_lossy().into_owned()),
            Err(_) => Some(folder.to_string_lossy().into_owned()),
        }
    }

    /// The process as the wire describes it.
    pub fn describe(&self) -> ManagedProcess {
        let live = lock(&self.live);
        let [stdout_bytes, stderr_bytes, pty_bytes] = live.ring.totals();
        ManagedProcess {
            id: self.id.clone(),
            kind: self.kind,
            cmd: self.cmd.clone(),
            pid: self.public_pid,
            cwd: (live.state == ProcessState::Running)
                .then(|| self.cwd())
                .flatten(),
            tty: self.tty,
            state: live.state,
            exit_code: live.exit.map(|e| e.code),
            signal: live.exit.and_then(|e| e.signal),
            started_at: rfc3339(self.started_at),
            ended_at: live.ended_at.map(rfc3339),
            stdout_bytes,
            stderr_bytes,
            pty_bytes,
            last_seq: live.ring.last_seq(),
            first_seq: live.ring.first_seq(),
            dropped_bytes: live.ring.dropped_bytes(),
            stdin_open: live.stdin_open && live.state == ProcessState::Running,
            artifacts: live.artifacts.clone(),
        }
    }

    /// Whether it has ended and its output is complete.
    pub fn is_done(&self) -> bool {
        let live = lock(&self.live);
        live.state != ProcessState::Running && live.output_closed
    }

    /// A receiver that wakes on every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    pub(super) fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Output after `after_seq`, at most about `max_bytes`.
    pub fn read(&self, after_seq: u64, max_bytes: usize) -> ProcessOutput {
        let read = lock(&self.live).ring.read(after_seq, max_bytes);
        let chunks: Vec<OutputChunk> = read.chunks.iter().map(wire_chunk).collect();
        let process = self.describe();
        let done = self.is_done() && read.next_after_seq >= process.last_seq;
        ProcessOutput {
            chunks,
            dropped: read.dropped,
            next_after_seq: read.next_after_seq,
            done,
            process,
        }
    }

    /// As [`read`](Self::read), waiting up to `wait` for something after `after_seq`.
    pub async fn read_waiting(
        &self,
        after_seq: u64,
        max_bytes: usize,
        wait: Duration,
    ) -> ProcessOutput {
        let mut changes = self.subscribe();
        let deadline = tokio::time::Instant::now() + wait.min(MAX_WAIT);
        loop {
            changes.borrow_and_update();
            let output = self.read(after_seq, max_bytes);
            if !output.chunks.is_empty() || output.dropped.is_some() || output.done {
                return output;
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return self.read(after_seq, max_bytes) },
                () = tokio::time::sleep_until(deadline) => return self.read(after_seq, max_bytes),
            }
        }
    }

    /// Waits until it has ended and its output is complete.
    pub async fn ended(&self) {
        let mut changes = self.subscribe();
        while !self.is_done() {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    /// Writes to its standard input (typed input on a terminal); `close` ends it (Ctrl-D on a
    /// terminal).
    pub async fn write_stdin(&self, bytes: &[u8], close: bool) -> Result<bool, ManagedError> {
        if lock(&self.live).state != ProcessState::Running {
            return Err(ManagedError::Conflict(format!(
                "process `{}` has ended",
                self.id
            )));
        }
        let mut input = self.input.lock().await;
        match &mut *input {
            Input::Terminal(master) => {
                let mut bytes = bytes.to_vec();
                if close {
                    bytes.push(0x04);
                }
                master.write_all(&bytes).await.map_err(|err| {
                    ManagedError::Conflict(format!(
                        "writing to the terminal of `{}`: {err}",
                        self.id
                    ))
                })?;
                Ok(true)
            }
            Input::Shell(_) => Err(ManagedError::Conflict(format!(
                "`{}` is a shell: send it commands with POST /v1/shells/{}/run",
                self.id, self.id
            ))),
            Input::Pipe(pipe) => {
                let Some(sender) = pipe.as_mut() else {
                    return Err(ManagedError::Conflict(format!(
                        "the standard input of `{}` is closed",
                        self.id
                    )));
                };
                if let Err(err) = sender.write_all(bytes).await {
                    *pipe = None;
                    lock(&self.live).stdin_open = false;
                    return Err(ManagedError::Conflict(format!(
                        "the standard input of `{}` is closed (the program no longer reads it): {err}",
                        self.id
                    )));
                }
                if close {
                    *pipe = None;
                    lock(&self.live).stdin_open = false;
                }
                Ok(!close)
            }
        }
    }

    /// Sends `signal` to its foreground: the terminal's foreground group, or its own group.
    pub fn signal(&self, signal: SignalName) -> Result<(), ManagedError> {
        if lock(&self.live).state != ProcessState::Running {
            return Err(ManagedError::Conflict(format!(
                "process `{}` has ended",
                self.id
            )));
        }
        let group = self
            .master
            .as_ref()
            .and_then(|m| m.foreground_group())
            .unwrap_or(self.pid as i32);
        self.supervisor
            .signal_group(group, nix_signal(signal))
            .map_err(|err| ManagedError::Conflict(format!("signalling `{}`: {err}", self.id)))
    }

    /// Resizes its terminal.
    pub fn resize(&self, size: TtySize) -> Result<(), ManagedError> {
        check_size(size)?;
        let Some(master) = &self.master else {
            return Err(ManagedError::Conflict(format!(
                "process `{}` has no terminal (start it with `tty`)",
                self.id
            )));
        };
        if lock(&self.live).state != ProcessState::Running {
            return Err(ManagedError::Conflict(format!(
                "process `{}` has ended",
                self.id
            )));
        }
        master.resize(size.rows, size.cols).map_err(|err| {
            ManagedError::Conflict(format!("resizing the terminal of `{}`: {err}", self.id))
        })
    }

    /// Kills everything it started, recording why it ended.
    pub(super) async fn kill(&self, table: &ProcessTable, why: ProcessState) -> KillReport {
        {
            let mut live = lock(&self.live);
            // An ended one may have left children running; they are its to the end.
            if live.state == ProcessState::Running {
                live.ending.get_or_insert(why);
            }
        }
        table
            .inner
            .supervisor
            .kill_call(self.pid, &self.marker, table.inner.limits.kill_grace)
            .await
    }
}

fn rfc3339(time: SystemTime) -> String {
    let seconds = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    crate::time::rfc3339(seconds)
}

fn wire_chunk(chunk: &ring::Chunk) -> OutputChunk {
    let (encoding, data) = match std::str::from_utf8(&chunk.bytes) {
        Ok(text) => (Encoding::Utf8, text.to_owned()),
        Err(_) => (
            Encoding::Base64,
            base64::engine::general_purpose::STANDARD.encode(&chunk.bytes),
        ),
    };
    OutputChunk {
        seq: chunk.seq,
        stream: chunk.stream,
        offset: chunk.offset,
        encoding,
        data,
    }
}

fn nix_signal(signal: SignalName) -> nix::sys::signal::Signal {
    use nix::sys::signal::Signal;
    match signal {
        SignalName::Int => Signal::SIGINT,
        SignalName::Term => Signal::SIGTERM,
        SignalName::Kill => Signal::SIGKILL,
        SignalName::Hup => Signal::SIGHUP,
        SignalName::Quit => Signal::SIGQUIT,
        SignalName::Usr1 => Signal::SIGUSR1,
        SignalName::Usr2 => Signal::SIGUSR2,
        SignalName::Stop => Signal::SIGSTOP,
        SignalName::Cont => Signal::SIGCONT,
        SignalName::Winch => Signal::SIGWINCH,
    }
}

/// Decodes input sent as text or base64.
pub fn decode_input(data: &str, encoding: Encoding) -> Result<Vec<u8>, ManagedError> {
    match encoding {
        Encoding::Utf8 => Ok(data.as_bytes().to_vec()),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|err| ManagedError::Invalid(format!("data: not base64: {err}"))),
    }
}
