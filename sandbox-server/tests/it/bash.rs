use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::common;

#[tokio::test]
async fn output_uses_the_seed_layout_and_runs_in_the_workspace_root() {
    let server = common::start().await;
    let result = server
        .ok("bash", json!({"cmd": "echo hi; echo err >&2; exit 3"}))
        .await;
    assert_eq!(result["output"], "exit=3\nstdout:\n  hi\nstderr:\n  err");
    assert_eq!(result["exit_code"], 3);
    assert_eq!(result["stdout"], "hi\n");
    assert_eq!(result["stderr"], "err\n");
    assert_eq!(result["timed_out"], false);
    assert_eq!(result["signal"], json!(null));

    let result = server
        .ok("bash", json!({"cmd": "pwd; printf 'a\\n\\n  b\\n'"}))
        .await;
    let root = server.workspace.path().canonicalize().unwrap();
    assert_eq!(
        result["output"],
        format!("exit=0\nstdout:\n  {}\n  a\n\n    b", root.display())
    );

    let result = server.ok("bash", json!({"cmd": "true"})).await;
    assert_eq!(result["output"], "exit=0");

    let result = server.ok("bash", json!({"cmd": "kill -9 $$"})).await;
    assert_eq!(
        (result["exit_code"].as_i64(), result["signal"].as_i64()),
        (Some(137), Some(9))
    );
}

#[tokio::test]
async fn timeout_kills_the_whole_tree_including_escaped_children() {
    let server = common::start().await;
    let cmd = "echo $$ > shell.pid; \
               sleep 300 & echo $! > child.pid; \
               setsid sleep 300 & echo $! > escaped.pid; \
               (setsid bash -c 'echo $$ > daemon.pid; exec sleep 300' &); \
               echo started; sleep 30";
    let start = Instant::now();
    let result = server.ok("bash", json!({"cmd": cmd, "timeout": 1})).await;
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(950) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    assert_eq!(result["timed_out"], true);
    assert_eq!(result["exit_code"], 143, "bash dies of SIGTERM: {result}");
    assert_eq!(
        result["stdout"], "started\n",
        "output printed before the timeout is kept"
    );
    assert!(
        result["output"]
            .as_str()
            .unwrap()
            .contains("timed out after 1 s")
    );
    for name in ["shell.pid", "child.pid", "escaped.pid", "daemon.pid"] {
        let pid = common::read_pid_file(&server.path(name));
        assert!(!server.alive(pid), "{name} ({pid}) survived the timeout");
    }
    let (_, processes) = server.get_json("/v1/processes").await;
    assert_eq!(processes["processes"], json!([]));
}

#[tokio::test]
async fn a_tree_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let server = common::start_with_args(["--kill-grace-ms", "300"]).await;
    let cmd = "trap '' TERM; bash -c \"trap '' TERM; echo \\$\\$ > inner.pid; while :; do sleep 0.05; done\" & \
               while :; do sleep 0.05; done";
    let start = Instant::now();
    let result = server.ok("bash", json!({"cmd": cmd, "timeout": 1})).await;
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(result["timed_out"], true);
    assert_eq!(result["exit_code"], 137, "{result}");
    assert!(!server.alive(common::read_pid_file(&server.path("inner.pid"))));
}

#[tokio::test]
async fn background_children_do_not_hang_the_call_and_can_be_listed_and_ended() {
    let server = common::start().await;
    let start = Instant::now();
    let result = server
        .ok("bash", json!({"cmd": "sleep 100 & echo hi"}))
        .await;
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(result["stdout"], "hi\n");
    let pids = result["background_pids"].as_array().unwrap();
    assert_eq!(pids.len(), 1, "{result}");
    let pid = pids[0].as_u64().unwrap() as u32;
    assert!(
        result["output"]
            .as_str()
            .unwrap()
            .contains(&format!("still running in the background: pid {pid}"))
    );

    let (status, listing) = server.get_json("/v1/processes").await;
    assert_eq!(status, 200);
    let processes = listing["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 1, "{listing}");
    assert_eq!(processes[0]["pid"], pid);
    assert_eq!(processes[0]["command"], "sleep 100");
    assert_eq!(processes[0]["call_id"], result["call_id"]);
    assert_eq!(processes[0]["foreground"], false);
    assert!(processes[0]["started_at"].as_str().unwrap().ends_with('Z'));

    let host = server.host_pid(pid);
    let (status, killed) = server.delete(&format!("/v1/processes/{pid}")).await;
    assert_eq!(status, 200);
    assert_eq!(
        killed,
        json!({"killed": [pid], "forced": false, "commands": ["sleep 100"]})
    );
    assert!(common::gone_within(host, Duration::from_secs(2)).await);

    let response = server
        .send(reqwest::Method::DELETE, &format!("/v1/processes/{pid}"))
        .await;
    assert_eq!(response.status(), 404);
    let response = server
        .send(reqwest::Method::DELETE, "/v1/processes/1")
        .await;
    assert_eq!(response.status(), 404, "pid 1 is not ours");
    // Not a pid: a process id, and there is none by that name.
    let (status, body) = server.delete("/v1/processes/abc").await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "process_not_found");
}

#[tokio::test]
async fn long_output_is_cut_for_the_model_and_kept_whole_as_an_artifact() {
    let server = common::start().await;
    let result = server.ok("bash", json!({"cmd": "seq 1 100000"})).await;
    let output = result["output"].as_str().unwrap();
    assert!(output.chars().count() <= 25_000, "{}", output.len());
    assert!(output.starts_with("exit=0\nstdout:\n  1\n  2\n"));
    assert!(
        output.ends_with("  99999\n  100000"),
        "{}",
        &output[output.len() - 50..]
    );
    let artifact = &result["stdout_artifact"];
    let id = artifact["id"].as_str().unwrap();
    assert!(output.contains(&format!(
        "bytes elided; the full stdout is artifact {id}: GET /v1/artifacts/{id}]"
    )));
    assert_eq!(artifact["truncated"], true);
    assert_eq!(artifact["capped"], false);

    let expected: String = (1..=100_000).map(|n| format!("{n}\n")).collect();
    assert_eq!(artifact["size"], expected.len());
    assert_eq!(
        artifact["sha256"],
        hex::encode(Sha256::digest(expected.as_bytes()))
    );
    let body = server
        .send(reqwest::Method::GET, &format!("/v1/artifacts/{id}"))
        .await;
    assert_eq!(body.status(), 200);
    assert_eq!(body.text().await.unwrap(), expected);
}

#[tokio::test]
async fn artifacts_support_ranges() {
    let server = common::start().await;
    let result = server.ok("bash", json!({"cmd": "printf 0123456789"})).await;
    let id = result["stdout_artifact"]["id"].as_str().unwrap().to_owned();
    let url = format!("/v1/artifacts/{id}");
    let part = server.get_with(&url, "Range", "bytes=2-5").await;
    assert_eq!(part.status(), 206);
    assert_eq!(part.headers()["content-range"], "bytes 2-5/10");
    assert_eq!(part.text().await.unwrap(), "2345");
    let suffix = server.get_with(&url, "Range", "bytes=-3").await;
    assert_eq!(suffix.text().await.unwrap(), "789");
    let outside = server.get_with(&url, "Range", "bytes=100-").await;
    assert_eq!(outside.status(), 416);
    // A stream that printed nothing has an artifact too: empty, with the empty string's hash.
    let empty = &result["stderr_artifact"];
    assert_eq!(
        empty["sha256"],
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    let url = format!("/v1/artifacts/{}", empty["id"].as_str().unwrap());
    let whole = server.send(reqwest::Method::GET, &url).await;
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.bytes().await.unwrap().len(), 0);
    let ranged = server.get_with(&url, "Range", "bytes=0-").await;
    assert_eq!(ranged.status(), 416);

    let (status, body) = server.get_json("/v1/artifacts/art_doesnotexist").await;
    assert_eq!(
        (status, body["error"]["type"].as_str().unwrap()),
        (404, "not_found")
    );
}

#[tokio::test]
async fn invalid_utf8_is_replaced_and_flagged() {
    let server = common::start().await;
    let result = server
        .ok(
            "bash",
            json!({"cmd": "printf 'ok \\377 \\342\\202\\254\\n'"}),
        )
        .await;
    assert_eq!(result["stdout"], "ok \u{fffd} €\n");
    assert_eq!(result["stdout_artifact"]["invalid_utf8"], true);
    assert_eq!(result["stdout_artifact"]["size"], 9);
    assert_eq!(result["stderr_artifact"]["invalid_utf8"], false);
}

#[tokio::test]
async fn a_gigabyte_flood_keeps_memory_bounded_and_the_capped_artifact_exact() {
    let server = common::start().await;
    server.ok("bash", json!({"cmd": "echo warm-up"})).await;
    let pid = server.pid();
    let before = common::rss_kib(pid);
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            // Bounded: stops when the call returns, or after 120 s.
            let start = Instant::now();
            while sampling.load(std::sync::atomic::Ordering::Relaxed)
                && start.elapsed() < Duration::from_secs(120)
            {
                peak = peak.max(common::rss_kib(pid));
                std::thread::sleep(Duration::from_millis(10));
            }
            peak
        })
    };
    let result = server
        .ok(
            "bash",
            json!({"cmd": "yes | head -c 1000000000", "timeout": 300}),
        )
        .await;
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let peak = sampler.join().unwrap().max(common::rss_kib(pid));
    let growth_kib = peak.saturating_sub(before);
    assert!(
        growth_kib < 10 * 1024,
        "RSS grew by {growth_kib} KiB (from {before} KiB)"
    );

    let cap: usize = 64 << 20;
    let artifact = &result["stdout_artifact"];
    assert_eq!(artifact["total_bytes"], 1_000_000_000u64);
    assert_eq!(artifact["size"], cap);
    assert_eq!(artifact["capped"], true);
    let expected = "y\n".repeat(cap / 2);
    assert_eq!(
        artifact["sha256"],
        hex::encode(Sha256::digest(expected.as_bytes()))
    );
    let id = artifact["id"].as_str().unwrap();
    let bytes = server.get_bytes(&format!("/v1/artifacts/{id}")).await;
    assert_eq!(bytes.len(), cap);
    assert_eq!(
        hex::encode(Sha256::digest(&bytes)),
        artifact["sha256"].as_str().unwrap()
    );
    assert!(result["output"].as_str().unwrap().chars().count() <= 25_000);
}

#[tokio::test]
async fn sixty_four_concurrent_calls_all_complete() {
    let server = std::sync::Arc::new(common::start().await);
    let mut calls = Vec::new();
    for idx in 0..64 {
        let server = server.clone();
        calls.push(tokio::spawn(async move {
            let result = server
                .ok("bash", json!({"cmd": format!("sleep 0.2; echo {idx}")}))
                .await;
            (idx, result)
        }));
    }
    for call in calls {
        let (idx, result) = call.await.unwrap();
        assert_eq!(result["stdout"], format!("{idx}\n"), "{result}");
        assert_eq!(result["exit_code"], 0, "{result}");
    }
}
