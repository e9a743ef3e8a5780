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
        let mut exit: Option<ExitStatus> = None;
        let mut drain_until: Option<tokio::time::Instant> = None;
        let mut timed_out = false;
        while exit.is_none() || out_open || err_open {
            let far = tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
            tokio::select! {
                read = stdout.read(&mut out_buf), if out_open => match read {
                    Ok(0) | Err(_) => { out_open = false; self.flush(OutputStream::Stdout) }
                    Ok(n) => self.push(OutputStream::Stdout, &out_buf[..n]),
                },
                read = stderr.read(&mut err_buf), if err_open => match read {
                    Ok(0) | Err(_) => { err_open = false; self.flush(OutputStream::Stderr) }
                    Ok(n) => self.push(OutputStream::Stderr, &err_buf[..n]),
                },
                status = &mut exit_rx, if exit.is_none() => {
                    exit = Some(status.unwrap_or(ExitStatus { code: -1, signal: None }));
                    drain_until = Some(tokio::time::Instant::now() + DRAIN);
                }
                () = tokio::time::sleep_until(deadline.unwrap_or(far)), if deadline.is_some() && !timed_out && exit.is_none() => {
                    timed_out = true;
                    self.kill(table, ProcessState::TimedOut).await;
                }
                () = tokio::time::sleep_until(drain_until.unwrap_or(far)), if drain_until.is_some() => break,
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
        exit.unwrap_or(ExitStatus {
            code: -1,
            signal: None,
        })
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
        let mut exit: Option<ExitStatus> = None;
        let mut drain_until: Option<tokio::time::Instant> = None;
        let mut timed_out = false;
        while exit.is_none() || open {
            let far = tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
            tokio::select! {
                read = master.read(&mut buf), if open => match read {
                    Ok(0) | Err(_) => { open = false; self.flush(OutputStream::Pty) }
                    Ok(n) => self.push(OutputStream::Pty, &buf[..n]),
                },
                status = &mut exit_rx, if exit.is_none() => {
                    exit = Some(status.unwrap_or(ExitStatus { code: -1, signal: None }));
                    drain_until = Some(tokio::time::Instant::now() + DRAIN);
                }
                () = tokio::time::sleep_until(deadline.unwrap_or(far)), if deadline.is_some() && !timed_out && exit.is_none() => {
                    timed_out = true;
                    self.kill(table, ProcessState::TimedOut).await;
                }
                () = tokio::time::sleep_until(drain_until.unwrap_or(far)), if drain_until.is_some() => break,
            }
        }
        self.flush(OutputStream::Pty);
        exit.unwrap_or(ExitStatus {
            code: -1,
            signal: None,
        })
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
