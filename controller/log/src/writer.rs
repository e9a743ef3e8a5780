//! The one writer of `events.jsonl`: a thread that assigns `seq` and `ts`, writes whole lines,
//! and (durable) syncs each batch before acknowledging it (group commit).

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::{Durability, Envelope, Event, now};

pub(super) enum Cmd {
    Record {
        event: Box<Event>,
        ack: oneshot::Sender<Result<u64, String>>,
    },
    Close {
        ack: oneshot::Sender<Result<(), String>>,
    },
}

impl std::fmt::Debug for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Cmd::Record { .. } => "Record",
            Cmd::Close { .. } => "Close",
        })
    }
}

/// Starts the writer thread over an open file whose next event is `next_seq`.
pub(super) fn spawn(
    file: File,
    path: PathBuf,
    next_seq: u64,
    durability: Durability,
    redactor: Arc<crate::secrets::Redactor>,
) -> std::io::Result<mpsc::Sender<Cmd>> {
    let (tx, rx) = mpsc::channel(1024);
    let writer = Writer {
        file,
        path,
        next_seq,
        durability,
        redactor,
    };
    std::thread::Builder::new()
        .name("event-log-writer".to_owned())
        .spawn(move || writer.run(rx))?;
    Ok(tx)
}

/// The one owner of `events.jsonl`.
struct Writer {
    file: File,
    path: PathBuf,
    next_seq: u64,
    durability: Durability,
    redactor: Arc<crate::secrets::Redactor>,
}

impl Writer {
    /// Runs on its own thread: takes every pending command, writes one batch, syncs once, and
    /// then acknowledges the batch (group commit).
    fn run(mut self, mut rx: mpsc::Receiver<Cmd>) {
        while let Some(first) = rx.blocking_recv() {
            let mut batch = vec![first];
            while let Ok(more) = rx.try_recv() {
                batch.push(more);
            }
            let mut buffer = Vec::new();
            let mut acks = Vec::new();
            let mut close = None;
            for cmd in batch {
                match cmd {
                    Cmd::Record { event, ack } => match self.line(*event) {
                        Ok((line, seq)) => {
                            buffer.extend_from_slice(&line);
                            acks.push((ack, seq));
                        }
                        Err(message) => {
                            let _ = ack.send(Err(message));
                        }
                    },
                    Cmd::Close { ack } => close = Some(ack),
                }
            }
            let stop = close.is_some();
            if let Err(message) = self.commit(&buffer, stop) {
                for (ack, _) in acks {
                    let _ = ack.send(Err(message.clone()));
                }
                if let Some(ack) = close {
                    let _ = ack.send(Err(message));
                }
                return;
            }
            for (ack, seq) in acks {
                let _ = ack.send(Ok(seq));
            }
            if let Some(ack) = close {
                let _ = ack.send(Ok(()));
                return;
            }
        }
    }

    /// One redacted line with its newline, and the `seq` it took.
    fn line(&mut self, event: Event) -> Result<(Vec<u8>, u64), String> {
        let envelope = Envelope {
            seq: self.next_seq,
            ts: now(),
            event,
        };
        // Cannot fail for these types; an error takes no `seq`, so no gap is left.
        let line = serde_json::to_string(&envelope)
            .map_err(|err| format!("serializing an event: {err}"))?;
        self.next_seq += 1;
        let mut bytes = self.redactor.redact(&line).into_owned().into_bytes();
        bytes.push(b'\n');
        Ok((bytes, envelope.seq))
    }

    /// Writes a batch, and syncs it when durable (or at the close).
    fn commit(&mut self, buffer: &[u8], closing: bool) -> Result<(), String> {
        self.file
            .write_all(buffer)
            .and_then(|()| match (self.durability, closing) {
                (Durability::Durable, _) | (Durability::Relaxed, true) => self.file.sync_data(),
                (Durability::Relaxed, false) => Ok(()),
            })
            .map_err(|err| format!("writing {}: {err}", self.path.display()))
    }
}
