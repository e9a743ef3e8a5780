//! The stream views of a process: Server-Sent Events resumed after a disconnect, and a
//! full-screen program through the terminal's WebSocket.

use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::post;
use crate::common::{self, Server};

/// Server-Sent Events, parsed: (event, id, data) until the stream ends or `stop` says so.
pub(super) async fn sse(
    server: &Server,
    path: &str,
    last_event_id: Option<u64>,
    mut stop: impl FnMut(&str, u64, &Value) -> bool,
) -> Vec<(String, u64, Value)> {
    let mut request = server.request(reqwest::Method::GET, path);
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id.to_string());
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut body = response.bytes_stream();
    let (mut buffer, mut events) = (String::new(), Vec::new());
    while let Ok(Some(Ok(bytes))) = tokio::time::timeout(Duration::from_secs(40), body.next()).await
    {
        buffer.push_str(std::str::from_utf8(&bytes).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let (mut event, mut id, mut data) = (String::new(), 0, Value::Null);
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    event = v.to_owned();
                } else if let Some(v) = line.strip_prefix("id: ") {
                    id = v.parse().unwrap();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(v).unwrap();
                }
            }
            if event.is_empty() {
                continue; // a heartbeat
            }
            let done = stop(&event, id, &data) || event == "exit";
            events.push((event, id, data));
            if done {
                return events;
            }
        }
    }
    events
}

/// A build-like loop prints for 30 s; a watcher over SSE leaves in the middle and comes back
/// with `Last-Event-ID`, and ends up with every line exactly once.
#[tokio::test]
async fn an_sse_watcher_that_disconnects_loses_nothing() {
    let server = common::start().await;
    let cmd = "for i in $(seq 1 300); do echo \"step $i\"; sleep 0.1; done";
    let (status, _) = post(&server, "/v1/processes", json!({"id": "build", "cmd": cmd})).await;
    assert_eq!(status, 201);
    let path = "/v1/processes/build/events?heartbeat_ms=500";
    let started = Instant::now();
    let first = sse(&server, path, None, |_, _, _| {
        started.elapsed() > Duration::from_secs(8)
    })
    .await;
    let last_id = first.last().unwrap().1;
    // Away for a while, then back.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let second = sse(&server, path, Some(last_id), |_, _, _| false).await;
    let mut text = String::new();
    let mut seqs = Vec::new();
    for (event, id, data) in first.iter().chain(&second) {
        assert_ne!(event, "dropped", "nothing was dropped");
        if event == "output" {
            seqs.push(*id);
            text.push_str(data["data"].as_str().unwrap());
        }
    }
    let expected: String = (1..=300).map(|i| format!("step {i}\n")).collect();
    assert_eq!(text, expected);
    let mut sorted = seqs.clone();
    sorted.dedup();
    assert_eq!(seqs, sorted, "each event once, in order");
    let (event, _, exit) = second.last().unwrap();
    assert_eq!(event, "exit");
    assert_eq!(exit["exit_code"], 0);
}

async fn next_json(
    socket: &mut (
             impl futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin
         ),
) -> Option<Value> {
    loop {
        // Nothing for 20 s counts as the end.
        let frame = tokio::time::timeout(Duration::from_secs(20), socket.next())
            .await
            .ok()??
            .ok()?;
        match frame {
            Message::Text(text) => return Some(serde_json::from_str(&text).unwrap()),
            Message::Close(_) => return None,
            _ => continue,
        }
    }
}

/// Reads the socket until the terminal's accumulated output contains `needle`.
async fn until_screen_has(
    socket: &mut (
             impl futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin
         ),
    screen: &mut String,
    needle: &str,
) {
    while !screen.contains(needle) {
        let message = next_json(socket)
            .await
            .unwrap_or_else(|| panic!("closed or quiet before {needle:?}: {screen:?}"));
        match message["type"].as_str().unwrap() {
            "output" => screen.push_str(message["data"].as_str().unwrap()),
            "error" => panic!("{message}"),
            _ => {}
        }
    }
}

async fn open_pty(
    server: &Server,
    id: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = format!(
        "{}/v1/processes/{id}/pty",
        server.base.replace("http://", "ws://")
    );
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {}", common::TOKEN).parse().unwrap(),
    );
    let (socket, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(response.status().as_u16(), 101);
    socket
}

/// A full-screen program through the terminal: the size it sees, a resize, keystrokes, its
/// screen, and its end.
#[tokio::test]
async fn a_tui_runs_through_the_pty_websocket() {
    let server = common::start_with_token().await;
    // Reports its size at start and on every SIGWINCH, echoes each key, ends on `q`.
    let tui = r#"trap 'echo "size $(stty size)"' WINCH; echo "size $(stty size)"; while :; do if read -rsn1 k; then echo "key:$k"; [ "$k" = q ] && exit 0; fi; done"#;
    let (status, started) = post(
        &server,
        "/v1/processes",
        json!({"id": "tui", "cmd": tui, "tty": {"rows": 24, "cols": 80}}),
    )
    .await;
    assert_eq!(status, 201, "{started}");
    let mut socket = open_pty(&server, "tui").await;
    let mut screen = String::new();
    until_screen_has(&mut socket, &mut screen, "size 24 80").await;
    let resize = json!({"type": "resize", "rows": 40, "cols": 120}).to_string();
    socket.send(Message::Text(resize.into())).await.unwrap();
    // bash runs the WINCH trap once `read` has its key.
    socket
        .send(Message::Binary(b"x".to_vec().into()))
        .await
        .unwrap();
    until_screen_has(&mut socket, &mut screen, "key:x").await;
    until_screen_has(&mut socket, &mut screen, "size 40 120").await;
    let bad = json!({"type": "resize", "rows": 0, "cols": 5}).to_string();
    socket.send(Message::Text(bad.into())).await.unwrap();
    let error = next_json(&mut socket).await.unwrap();
    assert_eq!(error["type"], "error", "{error}");
    let q = json!({"type": "input", "data": "q"}).to_string();
    socket.send(Message::Text(q.into())).await.unwrap();
    let mut exit = Value::Null;
    while let Some(message) = next_json(&mut socket).await {
        if message["type"] == "exit" {
            exit = message;
        }
    }
    assert_eq!(exit["process"]["exit_code"], 0, "{exit}");

    // `top`, a real full-screen program: it draws, and a keystroke ends it.
    let (status, _) = post(
        &server,
        "/v1/processes",
        json!({"id": "top", "cmd": "top -d 0.5", "tty": {"rows": 30, "cols": 100}}),
    )
    .await;
    assert_eq!(status, 201);
    let mut socket = open_pty(&server, "top").await;
    let mut screen = String::new();
    until_screen_has(&mut socket, &mut screen, "PID").await;
    socket
        .send(Message::Binary(b"q".to_vec().into()))
        .await
        .unwrap();
    let mut exited = false;
    while let Some(message) = next_json(&mut socket).await {
        exited |= message["type"] == "exit" && message["process"]["exit_code"] == 0;
    }
    assert!(exited, "top quit on `q`: {screen}");
}
