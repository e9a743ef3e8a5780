//! Hostile inputs to the workspace-state routes: a file that grows while snapshots read it, a
//! sparse file of hundreds of gibibytes, a watched path swapped for a FIFO, archive clients
//! that read nothing, a workspace of more paths than a scan may hold.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{self, Answer};

/// The manifest entry of `path` in snapshot `id`, if it has one.
async fn manifest_entry(server: &common::Server, id: &str, path: &str) -> Option<Value> {
    let (status, manifest) = server
        .get_json(&format!("/v1/workspace/snapshots/{id}"))
        .await;
    assert_eq!(status, 200, "{manifest}");
    manifest["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["path"] == path)
        .cloned()
}

/// An MCP `tools/call` over `/mcp`; returns the JSON-RPC result.
async fn mcp_call(server: &common::Server, tool: &str, arguments: Value) -> Value {
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}});
    let (status, body) = server
        .request(reqwest::Method::POST, "/mcp")
        .header("accept", "application/json, text/event-stream")
        .json(&request)
        .answer()
        .await;
    assert_eq!(status, 200, "{body}");
    body["result"].clone()
}

/// Appends 512-byte tar headers (`injected-N`, empty files) to `grow.bin` until `stop` exists
/// (or a minute has passed): whatever size a snapshot saw, the bytes after it are tar entries.
const GROWER: &str = "\
import os, tarfile, time
fd = os.open('grow.bin', os.O_WRONLY | os.O_APPEND)
deadline = time.time() + 60
i = 0
while not os.path.exists('stop') and time.time() < deadline:
    os.write(fd, tarfile.TarInfo('injected-%d' % i).tobuf(tarfile.GNU_FORMAT))
    i += 1
    time.sleep(0.0002)
";

fn injected(server: &common::Server) -> Vec<String> {
    std::fs::read_dir(server.workspace.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("injected"))
        .collect()
}

/// A file grows while snapshots read it. Each snapshot either keeps it with a blob of exactly
/// the size it records, or leaves it out as changed while read; and a restore never unpacks the
/// bytes it grew by (tar headers of their own) as entries.
#[tokio::test]
async fn a_file_growing_while_snapshotted_injects_nothing_into_a_restore() {
    let server = common::start().await;
    std::fs::write(server.path("grow.bin"), vec![0u8; 4 << 20]).unwrap();
    std::fs::write(server.path("grow.py"), GROWER).unwrap();
    server
        .ok("bash", json!({"cmd": "python3 grow.py > /dev/null 2>&1 &"}))
        .await;
    let mut last = String::new();
    for _ in 0..12 {
        let snapshot = server.post_ok("/v1/workspace/snapshot").await;
        last = snapshot["snapshot_id"].as_str().unwrap().to_owned();
        match manifest_entry(&server, &last, "grow.bin").await {
            Some(entry) => {
                let sha256 = entry["sha256"].as_str().unwrap();
                let blob = server.get_bytes(&format!("/v1/blobs/{sha256}")).await;
                assert_eq!(
                    Some(blob.len() as u64),
                    entry["size"].as_u64(),
                    "a kept blob is as long as the size recorded beside it"
                );
            }
            None => {
                let skipped = common::item(&snapshot["skipped"], "path", "grow.bin");
                let reason = skipped["reason"].as_str().unwrap();
                assert!(reason.contains("changed while it was read"), "{reason}");
            }
        }
    }
    std::fs::write(server.path("stop"), "").unwrap();
    server.send(reqwest::Method::DELETE, "/v1/processes").await;
    wait_still(&server.path("grow.bin")).await;
    let still = server.post_ok("/v1/workspace/snapshot").await;
    let still = still["snapshot_id"].as_str().unwrap().to_owned();
    let entry = manifest_entry(&server, &still, "grow.bin").await.unwrap();

    let restored = mcp_call(&server, "workspace_restore", json!({"snapshot_id": last})).await;
    assert_eq!(restored["isError"], false, "{restored}");
    assert_eq!(injected(&server), Vec::<String>::new());
    // Still, it is kept whole and restored whole, with nothing after it unpacked.
    let restored = mcp_call(&server, "workspace_restore", json!({"snapshot_id": still})).await;
    assert_eq!(restored["isError"], false, "{restored}");
    let length = std::fs::metadata(server.path("grow.bin")).unwrap().len();
    assert_eq!(Some(length), entry["size"].as_u64());
    assert_eq!(injected(&server), Vec::<String>::new());
}

/// Waits (bounded) until the file at `path` has kept its length for 200 ms.
async fn wait_still(path: &std::path::Path) {
    let length = || std::fs::metadata(path).unwrap().len();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut before = length();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = length();
        if now == before {
            return;
        }
        assert!(Instant::now() < deadline, "{} still grows", path.display());
        before = now;
    }
}

/// A sparse file of 256 GiB (over the blob store's limit) is not read: a snapshot of it takes a
/// moment, not the minutes its bytes would, and a write to it is still a change.
#[tokio::test]
async fn a_sparse_giant_is_not_read_and_its_change_is_still_seen() {
    let server = common::start().await;
    let giant = std::fs::File::create(server.path("sparse.img")).unwrap();
    giant.set_len(256 << 30).unwrap();
    let limit = Duration::from_secs(20);
    let snapshot = tokio::time::timeout(limit, server.post_ok("/v1/workspace/snapshot"))
        .await
        .expect("a snapshot reads no file over the blob limit");
    assert_eq!(
        (snapshot["n_files"].as_u64(), snapshot["n_hashed"].as_u64()),
        (Some(1), Some(0))
    );
    let id = snapshot["snapshot_id"].as_str().unwrap();
    let entry = manifest_entry(&server, id, "sparse.img").await.unwrap();
    assert_eq!(entry["size"].as_u64(), Some(256 << 30));
    let sha256 = entry["sha256"].as_str().unwrap();
    let (status, _) = server.get_json(&format!("/v1/blobs/{sha256}")).await;
    assert_eq!(status, 404, "its content is not kept");

    // One byte in the middle, a timestamp tick later: the same size, other times.
    tokio::time::sleep(Duration::from_millis(20)).await;
    std::os::unix::fs::FileExt::write_at(&giant, b"x", 100 << 30).unwrap();
    let since = format!("/v1/workspace/changes?since={id}");
    let (status, changes) = tokio::time::timeout(limit, server.get_json(&since))
        .await
        .expect("changes read no file over the blob limit");
    assert_eq!(status, 200, "{changes}");
    assert_eq!(
        common::string_pairs(&changes["changes"], "path", "change"),
        [("sparse.img", "modified")]
    );
}

/// A watched file that a command swaps for a FIFO, as fast as it can: no fingerprint waits on
/// the FIFO for a writer that never comes.
#[tokio::test]
async fn a_watched_file_swapped_for_a_fifo_never_holds_the_fingerprint() {
    let watched = tempfile::tempdir().unwrap();
    let path = watched.path().join("profile");
    std::fs::write(&path, "export A=1\n").unwrap();
    let server = common::start_with_args(["--watch".to_owned(), path.display().to_string()]).await;
    let stop = Arc::new(AtomicBool::new(false));
    let n_swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, n_swaps, dir) = (stop.clone(), n_swaps.clone(), watched.path().to_owned());
        std::thread::spawn(move || {
            let (fifo, file) = (dir.join("fifo.tmp"), dir.join("file.tmp"));
            while !stop.load(Ordering::Relaxed) {
                let mode = nix::sys::stat::Mode::from_bits_truncate(0o600);
                nix::unistd::mkfifo(&fifo, mode).unwrap();
                std::fs::rename(&fifo, dir.join("profile")).unwrap();
                std::fs::write(&file, "export A=2\n").unwrap();
                std::fs::rename(&file, dir.join("profile")).unwrap();
                n_swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let (started, mut n_answers, mut stuck) = (Instant::now(), 0, None);
    while started.elapsed() < Duration::from_secs(3) {
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            server.get_json("/v1/state/fingerprint"),
        )
        .await;
        match answer {
            Ok((200, _)) => n_answers += 1,
            Ok((status, body)) => {
                stuck = Some(format!("{status}: {body}"));
                break;
            }
            Err(_) => {
                stuck = Some("no answer within 10 s".to_owned());
                break;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert_eq!(stuck, None, "after {n_answers} fingerprints");
    assert!(n_answers > 0 && n_swaps.load(Ordering::Relaxed) > 0);
}

/// A watched file swapped for a sparse giant is not read (a fingerprint answers at once) and a
/// change to it is still seen; a dense watched file's hash is its content's, the same in every
/// server.
#[tokio::test]
async fn a_sparse_giant_watched_file_is_not_read_and_a_dense_one_hashes_alike() {
    let watched = tempfile::tempdir().unwrap();
    let (giant, dense) = (watched.path().join("giant"), watched.path().join("dense"));
    std::fs::File::create(&giant)
        .unwrap()
        .set_len(256 << 30)
        .unwrap();
    std::fs::write(&dense, vec![7u8; 20 << 20]).unwrap();
    let args = |path: &std::path::Path| ["--watch".to_owned(), path.display().to_string()];
    let server = common::start_with_args(args(&giant)).await;
    let fingerprint = || async {
        let answer = tokio::time::timeout(
            Duration::from_secs(20),
            server.get_json("/v1/state/fingerprint"),
        );
        let (status, body) = answer.await.expect("a fingerprint within 20 s");
        assert_eq!(status, 200, "{body}");
        body["watched"].to_string()
    };
    let before = fingerprint().await;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&giant)
        .unwrap()
        .set_len(128 << 30)
        .unwrap();
    assert_ne!(fingerprint().await, before, "the change is seen");
    let hashes = futures::future::join_all((0..2).map(|_| async {
        let server = common::start_with_args(args(&dense)).await;
        let (_, body) = server.get_json("/v1/state/fingerprint").await;
        body["watched"].to_string()
    }))
    .await;
    assert_eq!(
        hashes[0], hashes[1],
        "two servers hash the dense file alike"
    );
}

/// Clients that ask for the archive and read nothing hold at most 16 writers; the next is told
/// to retry, and once they leave, their places are given back.
#[tokio::test]
async fn archive_streams_are_capped_and_give_their_place_back() {
    let server = common::start().await;
    // More than a stream's buffers hold, so each writer waits on its client.
    std::fs::write(server.path("data.bin"), vec![7u8; 32 << 20]).unwrap();
    let address = server.base.trim_start_matches("http://").to_owned();
    let request = format!("GET /v1/workspace/archive HTTP/1.1\r\nHost: {address}\r\n\r\n");
    let mut stalled = Vec::new();
    for _ in 0..16 {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&head));
        stalled.push(stream);
    }
    let refused = server
        .send(reqwest::Method::GET, "/v1/workspace/archive")
        .await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["type"], "overloaded");
    assert!(common::error_message(&body).contains("16"), "{body}");

    drop(stalled);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response = server
            .send(reqwest::Method::GET, "/v1/workspace/archive")
            .await;
        if response.status() == 200 {
            let archive = response.bytes().await.unwrap();
            assert!(archive.len() > 32 << 20, "{} bytes", archive.len());
            break;
        }
        assert!(Instant::now() < deadline, "no place was given back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every archive that ends well reads as whole: the body ends only once the writer has said
/// the archive is complete (a bounded count of downloads of a small workspace whose FIFOs,
/// each left out with a warning, keep the writer busy between its last chunk and that word).
#[tokio::test]
async fn every_finished_archive_download_is_whole() {
    let server = common::start().await;
    server
        .ok("bash", json!({"cmd": "mkdir -p d p && seq 1000 > d/a && echo b > b && cd p && mkfifo $(seq -f f%g 300)"}))
        .await;
    for round in 0..60 {
        let response = server
            .send(reqwest::Method::GET, "/v1/workspace/archive")
            .await;
        assert_eq!(response.status(), 200);
        let bytes = response
            .bytes()
            .await
            .unwrap_or_else(|err| panic!("download {round} did not end well: {err}"));
        let mut archive = tar::Archive::new(bytes.as_ref());
        let entries = archive.entries().unwrap().count();
        assert_eq!(entries, 4, "download {round}: d, d/a, b and p");
    }
}

/// A workspace of more paths than `--scan-max-entries`: a snapshot, the changes since one and
/// a listing of the folder are refused (413, naming the flag) rather than held whole in memory
/// (a tool call asking for its step gets its result without one);
/// the archive, whose status is sent before the walk, ends unfinished; a small folder still lists.
#[tokio::test]
async fn a_workspace_past_the_scan_limit_is_refused_by_name() {
    let server = common::start_with_args(["--scan-max-entries", "20"]).await;
    let (_, info) = server.get_json("/v1/info").await;
    assert_eq!(info["limits"]["scan_max_entries"], 20, "{info}");
    server
        .ok("bash", json!({"cmd": "mkdir few && touch few/a few/b"}))
        .await;
    let before = server.post_ok("/v1/workspace/snapshot").await;
    let since = before["snapshot_id"].as_str().unwrap().to_owned();
    server
        .ok(
            "bash",
            json!({"cmd": "for i in $(seq 30); do echo $i > f$i; done"}),
        )
        .await;
    let refused = |(status, body): (u16, Value)| {
        assert_eq!(status, 413, "{body}");
        assert_eq!(body["error"]["type"], "payload_too_large", "{body}");
        let message = common::error_message(&body).to_owned();
        assert!(message.contains("--scan-max-entries"), "{message}");
        message
    };
    let snapshot = server
        .request(reqwest::Method::POST, "/v1/workspace/snapshot")
        .answer()
        .await;
    let message = refused(snapshot);
    assert!(
        message.contains("more than 20 paths") && message.contains("stopped at path 21"),
        "{message}"
    );
    let changes = format!("/v1/workspace/changes?since={since}");
    refused(server.get_json(&changes).await);
    // A call that asks for its step still ran: its result stands, without the step.
    let (status, result) = server
        .call(&format!("bash?since={since}"), json!({"cmd": "echo ran"}))
        .await;
    assert_eq!(status, 200, "{result}");
    assert!(
        result["output"].as_str().unwrap().contains("ran"),
        "{result}"
    );
    assert!(result.get("step").is_none(), "{result}");
    let message = refused(server.get_json("/v1/dirs").await);
    assert!(message.contains("more than 20 entries"), "{message}");
    let (status, listing) = server.get_json("/v1/dirs/few").await;
    assert_eq!(status, 200, "{listing}");
    assert_eq!(listing["entries"].as_array().map(Vec::len), Some(2));

    let archive = server
        .request(reqwest::Method::GET, "/v1/workspace/archive")
        .send()
        .await;
    if let Ok(response) = archive {
        assert!(
            response.bytes().await.is_err(),
            "an archive past the limit never reads as whole"
        );
    }
}
