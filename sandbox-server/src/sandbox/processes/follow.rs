//! A managed process's one task: its output read into the buffer and the artifacts, its
//! timeout, its exit.

use super::*;

/// After a process exits, how long its pipes may stay open (held by children it left
/// running) before the server stops reading them.
const DRAIN: Duration = Duration::from_secs(2);

/// When the reading stops, how many reads of what a pipe already holds are taken at most
/// (16 × 64 KiB, past a pipe's default buffer), so a process that keeps writing cannot hold it.
const BUFFERED_READS: usize = 16;

impl Managed {
    /// Appends output, holding back a UTF-8 character cut at the end of the read.
    pub(super) fn push(&self, stream: OutputStream, bytes: &[u8]) {
        let filtered;
        let bytes = match &self.shell {
            Some(shell) => {
                filtered = shell.filter(stream, bytes);
                &filtered[..]
            }
            None => bytes,
        };
        {
            let mut live = lock(&self.live);
            // A call keeps its own capture; only the others have one here.
            if self.kind != ProcessKind::Call {
                let store = &self.artifacts;
                live.captures[slot(stream)]
                    .get_or_insert_with(|| store.capture(CAPTURE_TEXT))
                    .push(bytes);
            }
            let carry = &mut live.carry[slot(stream)];
            carry.extend_from_slice(bytes);
            let whole = std::mem::take(carry);
            let cut = utf8_cut(&whole);
            live.carry[slot(stream)] = whole[cut..].to_vec();
            live.ring.push(stream, &whole[..cut]);
        }
        self.bump();
    }

    /// Pushes what was held back, at the end of a stream.
    pub(super) fn flush(&self, stream: OutputStream) {
        let mut live = lock(&self.live);
        let rest = std::mem::take(&mut live.carry[slot(stream)]);
        live.ring.push(stream, &rest);
    }

    /// The process's one task: reads its output into the buffer, applies its timeout, records
    /// its exit, then stops reading once its output closed (or `DRAIN` after the exit).
    pub(super) async fn follow(
        self: Arc<Self>,
        output: Output,
        exit: tokio::sync::oneshot::Receiver<ExitStatus>,
        timeout: Option<Duration>,
        table: ProcessTable,
    ) {
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let exit = match output {
            Output::Pipes(stdout, stderr) => {
                self.follow_pipes(stdout, stderr, exit, deadline, &table)
                    .await
            }
            Output::Terminal(master) => self.follow_terminal(&master, exit, deadline, &table).await,
        };
        self.finish(exit, &table);
    }

    fn finish(&self, exit: ExitStatus, table: &ProcessTable) {
        {
            let mut live = lock(&self.live);
            live.state = live.ending.unwrap_or(ProcessState::Exited);
            live.exit = Some(exit);
            live.ended_at = Some(SystemTime::now());
            live.output_closed = true;
            live.stdin_open = false;
            for (stream, capture) in [
                OutputStream::Stdout,
                OutputStream::Stderr,
                OutputStream::Pty,
            ]
            .into_iter()
            .zip(std::mem::take(&mut live.captures))
            {
                if let Some(capture) = capture {
                    let artifact = capture.finish(&self.artifacts).artifact;
                    live.artifacts.push(StreamArtifact { stream, artifact });
                }
            }
        }
        if let Some(shell) = &self.shell {
            shell.shell_ended(exit);
        }
        table.inner.supervisor.call_finished(&self.marker);
        self.bump();
    }

    async fn follow_pipes(
        &self,
        mut stdout: tokio::net::unix::pipe::Receiver,
        mut stderr: tokio::net::unix::pipe::Receiver,
        mut exit_rx: tokio::sync::oneshot::Receiver<ExitStatus>,
        deadline: Option<tokio::time::Instant>,
        table: &ProcessTable,
    ) -> ExitStatus {
        let (mut out_buf, mut err_buf) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
        let (mut out_open, mut err_open) = (true, true);
        let mut ending = Ending::default();
        while ending.exit.is_none() || out_open || err_open {
            tokio::select! {
                read = stdout.read(&mut out_buf), if out_open => {
                    self.take_read(OutputStream::Stdout, &read, &out_buf, &mut out_open);
                }
                read = stderr.read(&mut err_buf), if err_open => {
                    self.take_read(OutputStream::Stderr, &read, &err_buf, &mut err_open);
                }
                turn = ending.next(&mut exit_rx, deadline) => {
                    if self.take_turn(turn, &mut ending, table).await {
                        break;
                    }
                }
            }
        }
        if out_open || err_open {
            // The drain's end can win the race with a ready pipe (after a stall, both are):
            // what the pipes hold already was written by the process, and is kept.
            for (pipe, open, stream) in [
                (&stdout, out_open, OutputStream::Stdout),
                (&stderr, err_open, OutputStream::Stderr),
            ] {
                for _ in 0..BUFFERED_READS {
                    match pipe.try_read(&mut out_buf) {
                        Ok(n) if open && n > 0 => self.push(stream, &out_buf[..n]),
                        // Closed, empty for now (`WouldBlock`), or broken.
                        _ => break,
                    }
                }
            }
            self.flush(OutputStream::Stdout);
            self.flush(OutputStream::Stderr);
            discard(stdout, stderr);
        }
        ending.status()
    }

    async fn follow_terminal(
        &self,
        master: &crate::process::pty::Master,
        mut exit_rx: tokio::sync::oneshot::Receiver<ExitStatus>,
        deadline: Option<tokio::time::Instant>,
        table: &ProcessTable,
    ) -> ExitStatus {
        let mut buf = vec![0u8; 64 * 1024];
        let mut open = true;
        let mut ending = Ending::default();
        while ending.exit.is_none() || open {
            tokio::select! {
                read = master.read(&mut buf), if open => {
                    self.take_read(OutputStream::Pty, &read, &buf, &mut open);
                }
                turn = ending.next(&mut exit_rx, deadline) => {
                    if self.take_turn(turn, &mut ending, table).await {
                        break;
                    }
                }
            }
        }
        self.flush(OutputStream::Pty);
        ending.status()
    }

    /// Takes a read of `stream` into `buf`: its bytes pushed, or at the stream's end (or a
    /// broken read) what was held back flushed and `open` cleared.
    fn take_read(
        &self,
        stream: OutputStream,
        read: &std::io::Result<usize>,
        buf: &[u8],
        open: &mut bool,
    ) {
        match read {
            Ok(0) | Err(_) => {
                *open = false;
                self.flush(stream);
            }
            Ok(n) => self.push(stream, &buf[..*n]),
        }
    }

    /// Applies `turn` to `ending`: an exit starts the drain, a timeout kills the process.
    /// Whether the drain is over, and the reading stops.
    async fn take_turn(&self, turn: Turn, ending: &mut Ending, table: &ProcessTable) -> bool {
        match turn {
            Turn::Exited(status) => {
                ending.exit = Some(status);
                ending.drain_until = Some(tokio::time::Instant::now() + DRAIN);
                false
            }
            Turn::TimedOut => {
                ending.timed_out = true;
                self.kill(table, ProcessState::TimedOut).await;
                false
            }
            Turn::Drained => true,
        }
    }
}

/// The exit status of a process whose exit was not reported.
const LOST: ExitStatus = ExitStatus {
    code: -1,
    signal: None,
};

/// What a follow loop waits for beside the output: the exit, the timeout, the drain's end.
#[derive(Default)]
struct Ending {
    exit: Option<ExitStatus>,
    /// When the reading stops, once the process exited.
    drain_until: Option<tokio::time::Instant>,
    timed_out: bool,
}

/// What happened to a followed process beside its output.
enum Turn {
    Exited(ExitStatus),
    TimedOut,
    Drained,
}

impl Ending {
    /// The next turn: the exit (`exit_rx`), the `deadline` passed before it, or the drain's end.
    async fn next(
        &self,
        exit_rx: &mut tokio::sync::oneshot::Receiver<ExitStatus>,
        deadline: Option<tokio::time::Instant>,
    ) -> Turn {
        let far = tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
        let (exited, timed_out) = (self.exit.is_some(), self.timed_out);
        tokio::select! {
            status = exit_rx, if !exited => Turn::Exited(status.unwrap_or(LOST)),
            () = tokio::time::sleep_until(deadline.unwrap_or(far)), if deadline.is_some() && !timed_out && !exited => Turn::TimedOut,
            () = tokio::time::sleep_until(self.drain_until.unwrap_or(far)), if self.drain_until.is_some() => Turn::Drained,
        }
    }

    /// The exit status: as reported, else [`LOST`].
    fn status(&self) -> ExitStatus {
        self.exit.unwrap_or(LOST)
    }
}

/// Children still holding the pipes keep running; what they print is read and discarded so
/// they do not die of SIGPIPE.
fn discard(
    mut stdout: tokio::net::unix::pipe::Receiver,
    mut stderr: tokio::net::unix::pipe::Receiver,
) {
    tokio::spawn(async move {
        let mut sink = vec![0u8; 16 * 1024];
        while matches!(stdout.read(&mut sink).await, Ok(n) if n > 0) {}
        while matches!(stderr.read(&mut sink).await, Ok(n) if n > 0) {}
    });
}

/// How much of `bytes` to pass on now: all of it, unless it ends inside a UTF-8 character
/// (then up to that character). Bytes that are not UTF-8 at all pass as they are.
fn utf8_cut(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(err) if err.error_len().is_none() => err.valid_up_to(),
        Err(_) => bytes.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_cut_by_a_read_waits_for_its_end() {
        let text = "héllo".as_bytes();
        assert_eq!(utf8_cut(&text[..2]), 1, "the é's first byte is held");
        assert_eq!(utf8_cut(text), text.len());
        assert_eq!(
            utf8_cut(b"\xff\xfeabc"),
            5,
            "not UTF-8 at all: passed as it is"
        );
    }
}
