//! `where: sandbox`: a stdio MCP server run inside the sandbox as a process started by id. Its
//! standard output is followed over the process's event stream and its standard input written
//! through the API, so the server is contained like any command (the sandbox's network rule,
//! Landlock, limits) and the controller starts nothing on its own machine.

use futures::StreamExt as _;
use hyper::body::Bytes;
use sandbox_protocol::{OutputStream, StartProcessRequest};
use tokio::io::AsyncReadExt as _;

use super::config::Transport;
use crate::sandbox::{LiveOutput, SandboxClient};

/// The process's two ends, as the MCP client reads and writes them, and its id.
pub(super) type Pipes = (
    tokio_util::io::StreamReader<
        futures::stream::BoxStream<'static, std::io::Result<Bytes>>,
        Bytes,
    >,
    tokio::io::DuplexStream,
);

/// A word quoted for `bash -c`.
fn quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// Starts the server as process `id` in `sandbox`; the pipes rmcp talks through.
pub(super) async fn start(
    sandbox: &SandboxClient,
    id: &str,
    transport: &Transport,
) -> Result<Pipes, String> {
    let Transport::Stdio {
        command, args, env, ..
    } = transport
    else {
        return Err("only a stdio server runs inside the sandbox".to_owned());
    };
    let cmd = std::iter::once(command)
        .chain(args)
        .map(|w| quoted(w))
        .collect::<Vec<_>>()
        .join(" ");
    let request = StartProcessRequest {
        id: id.to_owned(),
        cmd,
        cwd: None,
        env: env.clone(),
        tty: None,
        timeout: None,
    };
    sandbox
        .start_process(&request)
        .await
        .map_err(|err| format!("starting it in the sandbox: {err}"))?;
    // Its stdout, as the process's output events bring it (stderr stays in its artifacts).
    let (out_tx, out_rx) = tokio::sync::mpsc::unbounded_channel::<std::io::Result<Bytes>>();
    let follower = sandbox.clone();
    let process = id.to_owned();
    tokio::spawn(async move {
        let mut each = |piece: LiveOutput| {
            if let LiveOutput::Output {
                stream: OutputStream::Stdout,
                text,
            } = piece
            {
                let _ = out_tx.send(Ok(Bytes::from(text)));
            }
        };
        if let Err(err) = follower.follow_process(&process, &mut each).await {
            tracing::debug!(cause = %err, "an MCP server in the sandbox stopped being followed");
        }
    });
    let stream = futures::stream::unfold(out_rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .boxed();
    // Its stdin: what rmcp writes to one end of a pipe is sent on as it comes.
    let (ours, theirs) = tokio::io::duplex(64 << 10);
    let writer = sandbox.clone();
    let process = id.to_owned();
    tokio::spawn(async move {
        let mut theirs = theirs;
        let mut buffer = vec![0u8; 64 << 10];
        // A character cut by a read waits for the rest of it.
        let mut pending: Vec<u8> = Vec::new();
        loop {
            let n = match theirs.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            pending.extend_from_slice(&buffer[..n]);
            let whole = match std::str::from_utf8(&pending) {
                Ok(_) => pending.len(),
                Err(err) if err.error_len().is_none() => err.valid_up_to(),
                Err(_) => pending.len(),
            };
            let text = String::from_utf8_lossy(&pending[..whole]).into_owned();
            pending.drain(..whole);
            if !text.is_empty() && writer.write_stdin(&process, &text).await.is_err() {
                return;
            }
        }
    });
    Ok((tokio_util::io::StreamReader::new(stream), ours))
}
