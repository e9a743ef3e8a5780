use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::common::{self, Server};

/// The stream views: Server-Sent Events and the terminal's WebSocket.
mod streams;

/// `bash` calls as processes of kind `call`, followed while they run.
mod calls;

/// The `shell` tool: a model's persistent shell.
mod model_shell;

async fn post(server: &Server, path: &str, body: Value) -> (u16, Value) {
    let response = server
        .request(reqwest::Method::POST, path)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn get(server: &Server, path: &str) -> Value {
    let (status, body) = server.get_json(path).await;
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// Reads a process's output with long-polls until it is done (bounded), joining the chunks
/// of each stream; fails on any gap.
async fn read_all(server: &Server, id: &str) -> (String, String, Value) {
    let (mut out, mut err, mut after) = (String::new(), String::new(), 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "{id} did not finish");
        let page = get(
            server,
            &format!("/v1/processes/{id}/output?after_seq={after}&wait_ms=2000"),
        )
        .await;
        assert_eq!(page["dropped"], Value::Null, "{page}");
        for chunk in page["chunks"].as_array().unwrap() {
            let text = chunk["data"].as_str().unwrap();
            match chunk["stream"].as_str().unwrap() {
                "stderr" => err.push_str(text),
                _ => out.push_str(text),
            }
        }
        after = page["next_after_seq"].as_u64().unwrap();
        if page["done"] == true {
            return (out, err, page["process"].clone());
        }
    }
}

#[tokio::test]
async fn a_python_repl_is_driven_through_stdin() {
    let server = common::start().await;
    let (status, started) = post(
        &server,
        "/v1/processes",
        json!({"id": "repl", "cmd": "python3 -q -u -i"}),
    )
    .await;
    assert_eq!(status, 201, "{started}");
    assert_eq!(started["state"], "running");
    for line in [
        "x = 6 * 7\n",
        "print(x)\n",
        "import sys; print('err', file=sys.stderr)\n",
    ] {
        let (status, wrote) =
            post(&server, "/v1/processes/repl/stdin", json!({"data": line})).await;
        assert_eq!(status, 200, "{wrote}");
        assert_eq!(wrote["written"], line.len());
    }
    let (status, closed) = post(
        &server,
        "/v1/processes/repl/stdin",
        json!({"data": "", "close": true}),
    )
    .await;
    assert_eq!((status, closed["stdin_open"].clone()), (200, json!(false)));
    let (out, err, process) = read_all(&server, "repl").await;
    assert_eq!(out, "42\n");
    assert!(err.contains("err\n"), "{err}");
    assert_eq!(process["state"], "exited");
    assert_eq!(process["exit_code"], 0);
    // Its whole output is kept as artifacts once it has ended.
    let stdout = common::item(&process["artifacts"], "stream", "stdout");
    let id = stdout["artifact"]["id"].as_str().unwrap();
    let bytes = server.get_bytes(&format!("/v1/artifacts/{id}")).await;
    assert_eq!(&bytes[..], b"42\n");
    // Writing to an ended process is a conflict, named.
    let (status, refused) = post(&server, "/v1/processes/repl/stdin", json!({"data": "1\n"})).await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["type"], "process_conflict");
}

#[tokio::test]
async fn starting_an_id_again_is_idempotent_and_another_command_under_it_is_refused() {
    let server = common::start().await;
    let request = json!({"id": "srv", "cmd": "sleep 30"});
    let (first, a) = post(&server, "/v1/processes", request.clone()).await;
    let (again, b) = post(&server, "/v1/processes", request).await;
    assert_eq!((first, again), (201, 200));
    assert_eq!(a["pid"], b["pid"], "the same process");
    let (status, other) = post(
        &server,
        "/v1/processes",
        json!({"id": "srv", "cmd": "sleep 31"}),
    )
    .await;
    assert_eq!(status, 409, "{other}");
    let (status, digits) = post(
        &server,
        "/v1/processes",
        json!({"id": "123", "cmd": "true"}),
    )
    .await;
    assert_eq!(status, 422, "{digits}");
    assert!(common::error_message(&digits).contains("only digits"));
    // It is listed; deleting it kills it and forgets it.
    let listed = get(&server, "/v1/processes").await;
    assert_eq!(listed["managed"][0]["id"], "srv");
    let pid = a["pid"].as_u64().unwrap() as u32;
    let host = server.host_pid(pid);
    let (status, report) = server.delete("/v1/processes/srv").await;
    assert_eq!(status, 200);
    assert!(
        report["killed"].as_array().unwrap().contains(&json!(pid)),
        "{report}"
    );
    assert!(!common::alive(host));
    let (status, _) = server.get_json("/v1/processes/srv").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_quiet_process_outlives_its_readers_and_its_timeout_kills_its_tree() {
    let server = common::start().await;
    let (status, _) = post(
        &server,
        "/v1/processes",
        json!({"id": "quiet", "cmd": "sleep 100 & sleep 100", "timeout": 2}),
    )
    .await;
    assert_eq!(status, 201);
    // A read that waits and gets nothing does not end it.
    let page = get(
        &server,
        "/v1/processes/quiet/output?after_seq=0&wait_ms=500",
    )
    .await;
    assert_eq!(page["chunks"], json!([]));
    assert_eq!(page["process"]["state"], "running");
    let (_, _, process) = read_all(&server, "quiet").await;
    assert_eq!(process["state"], "timed_out");
    let listed = get(&server, "/v1/processes").await;
    let left: Vec<&Value> = listed["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["call_id"] == "process:quiet")
        .collect();
    assert!(
        left.is_empty(),
        "the timeout killed the whole tree: {left:?}"
    );
}

#[tokio::test]
async fn a_wrapped_buffer_tells_the_reader_exactly_what_it_missed() {
    let server = common::start_with_args(["--process-buffer", "1KiB"]).await;
    // 200 lines of 100 bytes, in separate writes.
    let cmd = "for i in $(seq 1 200); do printf '%099d\\n' $i; sleep 0.01; done";
    let (status, _) = post(&server, "/v1/processes", json!({"id": "big", "cmd": cmd})).await;
    assert_eq!(status, 201);
    let mut process = get(&server, "/v1/processes/big").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while process["state"] == "running" {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
        process = get(&server, "/v1/processes/big").await;
    }
    let page = get(&server, "/v1/processes/big/output?after_seq=0").await;
    let dropped = &page["dropped"];
    let first = page["chunks"][0]["seq"].as_u64().unwrap();
    assert_eq!(dropped["from_seq"], 1);
    assert_eq!(dropped["to_seq"].as_u64().unwrap(), first - 1);
    let kept: usize = page["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["data"].as_str().unwrap().len())
        .sum();
    let missed = dropped["bytes"].as_u64().unwrap();
    assert_eq!(
        missed + kept as u64,
        20_000,
        "every byte is either returned or counted"
    );
    assert_eq!(page["chunks"][0]["offset"].as_u64().unwrap(), missed);
    let largest = page["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["data"].as_str().unwrap().len())
        .max()
        .unwrap();
    assert!(
        kept <= 1024 + largest,
        "the buffer holds about its budget: {kept}"
    );
    assert_eq!(page["process"]["dropped_bytes"].as_u64().unwrap(), missed);
    // A reader one chunk behind the buffer is told about that chunk alone.
    let near = get(
        &server,
        &format!("/v1/processes/big/output?after_seq={}", first - 2),
    )
    .await;
    assert_eq!(near["dropped"]["from_seq"].as_u64().unwrap(), first - 1);
    assert_eq!(near["dropped"]["to_seq"].as_u64().unwrap(), first - 1);
}

#[tokio::test]
async fn a_persistent_shell_keeps_its_state_and_survives_ctrl_c() {
    let server = common::start().await;
    let (status, shell) = post(&server, "/v1/shells", json!({"id": "sh"})).await;
    assert_eq!(status, 201, "{shell}");
    let run = |cmd: &str| json!({"cmd": cmd, "timeout": 20});
    let (_, first) = post(
        &server,
        "/v1/shells/sh/run",
        run("mkdir -p sub && cd sub && export GREETING=hi && greet() { echo \"$GREETING $1\"; }"),
    )
    .await;
    assert_eq!(first["exit_code"], 0, "{first}");
    let (_, second) = post(
        &server,
        "/v1/shells/sh/run",
        run("greet there; pwd; echo oops >&2; (exit 3)"),
    )
    .await;
    assert_eq!(second["exit_code"], 3, "{second}");
    let cwd = server.path("sub").canonicalize().unwrap();
    assert_eq!(
        second["stdout"].as_str().unwrap(),
        format!("hi there\n{}\n", cwd.display())
    );
    assert_eq!(second["stderr"], "oops\n");
    // Ctrl-C on a sleep: the command ends with 130, the shell and its state live on.
    let interrupter = {
        let client = server.client.clone();
        let url = format!("{}/v1/shells/sh/interrupt", server.base);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(700)).await;
            client.post(url).send().await.unwrap().status().as_u16()
        })
    };
    let (_, slept) = post(
        &server,
        "/v1/shells/sh/run",
        run("echo start; sleep 60; echo never"),
    )
    .await;
    assert_eq!(interrupter.await.unwrap(), 204);
    assert_eq!(slept["exit_code"], 130, "{slept}");
    assert_eq!(slept["interrupted"], true);
    assert_eq!(slept["shell_alive"], true);
    assert_eq!(slept["stdout"], "start\n");
    assert!(slept["duration_ms"].as_u64().unwrap() < 10_000);
    let (_, after) = post(&server, "/v1/shells/sh/run", run("greet again")).await;
    assert_eq!(after["stdout"], "hi again\n", "{after}");
    // A command that reads its input gets end of file, not the next command.
    let (_, read) = post(
        &server,
        "/v1/shells/sh/run",
        run("read -r line; echo status=$?"),
    )
    .await;
    assert_eq!(read["stdout"], "status=1\n");
    // A timeout interrupts the command, not the shell.
    let (_, timed) = post(
        &server,
        "/v1/shells/sh/run",
        json!({"cmd": "sleep 30", "timeout": 1}),
    )
    .await;
    assert_eq!(
        (timed["timed_out"].clone(), timed["shell_alive"].clone()),
        (json!(true), json!(true))
    );
    // `exit` ends the shell, and says so.
    let (_, exited) = post(&server, "/v1/shells/sh/run", run("exit 4")).await;
    assert_eq!(exited["exit_code"], 4, "{exited}");
    assert_eq!(exited["shell_alive"], false);
    let (status, gone) = post(&server, "/v1/shells/sh/run", run("true")).await;
    assert_eq!(status, 409, "{gone}");
}

/// A command that ignores Ctrl-C: at its timeout everything below the shell is killed, and
/// the shell, with its state, goes on.
#[tokio::test]
async fn a_command_that_ignores_ctrl_c_is_killed_and_the_shell_lives_on() {
    let server = common::start().await;
    let (status, shell) = post(&server, "/v1/shells", json!({"id": "stubborn"})).await;
    assert_eq!(status, 201, "{shell}");
    let shell_pid = server.host_pid(shell["pid"].as_u64().unwrap() as u32);
    let run = |cmd: &str, timeout: u32| json!({"cmd": cmd, "timeout": timeout});
    let (_, set) = post(
        &server,
        "/v1/shells/stubborn/run",
        run("export KEPT=yes", 10),
    )
    .await;
    assert_eq!(set["exit_code"], 0, "{set}");
    let (_, stuck) = post(
        &server,
        "/v1/shells/stubborn/run",
        run("sh -c \"trap '' INT; echo deaf; exec sleep 60\"", 1),
    )
    .await;
    assert_eq!(stuck["timed_out"], true, "{stuck}");
    assert_eq!(stuck["shell_alive"], true, "{stuck}");
    assert_eq!(stuck["stdout"], "deaf\n", "{stuck}");
    assert!(stuck["duration_ms"].as_u64().unwrap() < 15_000, "{stuck}");
    let below: Vec<u32> = testkit::tree(shell_pid)
        .into_iter()
        .filter(|&pid| pid != shell_pid && common::alive(pid))
        .collect();
    assert!(below.is_empty(), "nothing of the run is left: {below:?}");
    let (_, after) = post(&server, "/v1/shells/stubborn/run", run("echo $KEPT", 10)).await;
    assert_eq!(
        (&after["stdout"], &after["shell_alive"]),
        (&json!("yes\n"), &json!(true)),
        "{after}"
    );
}

/// 64 processes stream 2 MiB each at once; the server keeps only their buffers.
#[tokio::test]
async fn sixty_four_streaming_processes_keep_server_memory_bounded() {
    let server = common::start().await;
    let before = common::rss_kib(server.pid());
    let cmd = "for i in $(seq 1 64); do head -c 32768 /dev/zero | tr '\\0' x; echo; done";
    for i in 0..64 {
        let (status, body) = post(
            &server,
            "/v1/processes",
            json!({"id": format!("p{i}"), "cmd": cmd}),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let mut peak = before;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        peak = peak.max(common::rss_kib(server.pid()));
        let listed = get(&server, "/v1/processes").await;
        let running = common::running(&listed);
        if running == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{running} still running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listed = get(&server, "/v1/processes").await;
    for process in listed["managed"].as_array().unwrap() {
        assert_eq!(process["stdout_bytes"], 64 * 32769, "{process}");
    }
    // 128 MiB printed; the buffers hold 64 × 256 KiB.
    let grew_mib = (peak.saturating_sub(before)) / 1024;
    assert!(grew_mib < 64, "the server grew by {grew_mib} MiB");
}

/// `exec` and `write_stdin`, opt-in tools: a command that outlives the call, driven by a model.
#[tokio::test]
async fn exec_and_write_stdin_drive_a_repl_across_calls() {
    let plain = common::start().await;
    let (status, refused) = plain.call("exec", json!({"cmd": "true"})).await;
    assert_eq!(status, 404, "opt-in: {refused}");
    assert!(common::error_message(&refused).contains("not enabled"));

    let server = common::start_with_args(["--tools", "bash,exec,write_stdin"]).await;
    let quick = server
        .ok("exec", json!({"cmd": "echo hi; echo oops >&2; exit 3"}))
        .await;
    assert_eq!(quick["running"], false, "{quick}");
    assert_eq!(quick["exit_code"], 3);
    // Two pipes: which of the two lines the server read first is not fixed.
    let output = quick["output"].as_str().unwrap();
    assert!(
        [
            "exit=3\noutput:\n  hi\n  oops",
            "exit=3\noutput:\n  oops\n  hi"
        ]
        .contains(&output),
        "{output}"
    );

    let repl = server
        .ok("exec", json!({"cmd": "python3 -q -u -i", "yield_ms": 1000}))
        .await;
    assert_eq!(repl["running"], true, "{repl}");
    let id = repl["process_id"].as_str().unwrap();
    assert!(
        repl["output"]
            .as_str()
            .unwrap()
            .starts_with(&format!("running: process {id}")),
        "{repl}"
    );
    let mut answer = server
        .ok(
            "write_stdin",
            json!({"process_id": id, "input": "print(6 * 7)\n", "yield_ms": 1000}),
        )
        .await;
    let mut seen = answer["new_output"].as_str().unwrap().to_owned();
    // A slow machine may need more than one look; empty input only waits (bounded).
    for _ in 0..10 {
        if seen.contains("42") {
            break;
        }
        answer = server
            .ok(
                "write_stdin",
                json!({"process_id": id, "input": "", "yield_ms": 1000}),
            )
            .await;
        seen.push_str(answer["new_output"].as_str().unwrap());
    }
    assert!(seen.contains("42"), "{answer}");
    assert!(
        !seen.contains(">>> >>> >>>"),
        "only what is new each time: {seen:?}"
    );
    let ended = server
        .ok(
            "write_stdin",
            json!({"process_id": id, "input": "exit()\n", "yield_ms": 5000}),
        )
        .await;
    assert_eq!(ended["running"], false, "{ended}");
    assert_eq!(ended["exit_code"], 0);
    let (status, gone) = server
        .call(
            "write_stdin",
            json!({"process_id": "exec-99", "input": "x"}),
        )
        .await;
    assert_eq!(status, 404, "{gone}");
    assert_eq!(gone["error"]["type"], "process_not_found");
}

/// Ending every process a client started, the image's entrypoint kept.
mod ending;
