//! Every route's memory is bounded: the server's peak resident size (`VmHWM`) is sampled
//! around requests that used to hold whole files or bodies.

use std::time::Duration;

use serde_json::json;

use crate::common;

/// The peak resident size so far, in MiB.
fn peak_mib(pid: u32) -> u64 {
    testkit::status_kib(pid, "VmHWM").expect("VmHWM") / 1024
}

/// Uploads stream to disk: 24 parallel 30 MiB `PUT /v1/files` (720 MiB in all) move the
/// peak by tens of MiB, not hundreds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parallel_uploads_stream() {
    let server = common::start().await;
    server.ok("bash", json!({"cmd": "true"})).await;
    let before = peak_mib(server.pid());
    let body = vec![b'x'; 30 << 20];
    let uploads = (0..24).map(|i| {
        let request = server
            .request(reqwest::Method::PUT, &format!("/v1/files/up/{i}.bin"))
            .body(body.clone());
        async move { request.send().await.unwrap().status().as_u16() }
    });
    let statuses = futures::future::join_all(uploads).await;
    assert!(statuses.iter().all(|s| *s == 201), "{statuses:?}");
    let grew = peak_mib(server.pid()) - before;
    eprintln!("24 parallel 30 MiB uploads: peak RSS grew {grew} MiB");
    assert!(grew < 120, "peak RSS grew {grew} MiB");
}

/// `search_replace` on a 256 MiB file and `read_file` on 100 MiB of long lines hold a chunk,
/// not the file.
#[tokio::test]
async fn big_files_are_streamed_by_the_file_tools() {
    let server = common::start().await;
    let mut big = vec![b'a'; 256 << 20];
    big[100 << 20..(100 << 20) + 6].copy_from_slice(b"NEEDLE");
    std::fs::write(server.path("big.txt"), &big).unwrap();
    drop(big);
    let line = format!("{}\n", "w".repeat(100 << 10));
    std::fs::write(server.path("wide.txt"), line.repeat(1000)).unwrap();
    server.ok("bash", json!({"cmd": "true"})).await;
    let before = peak_mib(server.pid());
    let replaced = server
        .ok(
            "search_replace",
            json!({"path": "big.txt", "search": "NEEDLE", "replace": "PIN"}),
        )
        .await;
    assert_eq!(replaced["bytes_written"], (256u64 << 20) - 3);
    let page = server
        .ok("read_file", json!({"path": "wide.txt", "limit": 1000}))
        .await;
    assert_eq!(page["total_lines"], 1000);
    let grew = peak_mib(server.pid()) - before;
    eprintln!("search_replace on 256 MiB, read_file over 100 MiB: peak RSS grew {grew} MiB");
    assert!(grew < 48, "peak RSS grew {grew} MiB");
    let edited = std::fs::read(server.path("big.txt")).unwrap();
    assert_eq!(&edited[100 << 20..(100 << 20) + 3], b"PIN");
    assert_eq!(edited.len(), (256 << 20) - 3);
}

/// Buffered bodies share one budget: 16 parallel 24 MiB tool calls wait their turn under a
/// 64 MiB budget instead of all being held at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buffered_bodies_share_a_budget() {
    let server = common::start_with_args([
        "--max-inflight-body-bytes".to_owned(),
        (64u64 << 20).to_string(),
    ])
    .await;
    server.ok("bash", json!({"cmd": "true"})).await;
    let before = peak_mib(server.pid());
    let content = "c".repeat(24 << 20);
    let calls = (0..16).map(|i| {
        let request = server
            .request(reqwest::Method::POST, "/v1/tools/write_file")
            .timeout(Duration::from_secs(120))
            .json(&json!({"path": format!("w/{i}.txt"), "content": content}));
        async move { request.send().await.unwrap().status().as_u16() }
    });
    let statuses = futures::future::join_all(calls).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let grew = peak_mib(server.pid()) - before;
    eprintln!("16 parallel 24 MiB tool calls under a 64 MiB budget: peak RSS grew {grew} MiB");
    assert!(
        grew < 256,
        "peak RSS grew {grew} MiB (unbounded, 16 bodies parse at once: over 1 GiB)"
    );
    let (_, info) = server.get_json("/v1/info").await;
    assert_eq!(info["limits"]["max_inflight_body_bytes"], 64u64 << 20);
}
