//! The OpenAPI document as a contract: what it allows the server takes, what it refuses the
//! server refuses with a 4xx, and off-the-shelf tools agree. The fuzzer (schemathesis) runs when
//! `HARNESS_TEST_SCHEMATHESIS` names its `st` program; the generated client when
//! `HARNESS_TEST_OPENAPI_CLIENT` names `openapi-python-client` (its venv's `python` runs the
//! driver); otherwise they say so and return. `.ci/run` installs both, pinned, and sets them.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use testkit::repo_root;

use crate::common::{self, Answer, TOKEN};

fn document() -> Value {
    let text = std::fs::read_to_string(repo_root().join("proto-docs/openapi.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// What a bounded run of a tool printed (standard output, then standard error).
pub(crate) struct Ran {
    pub(crate) success: bool,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs a tool that drives `server`, for at most `limit`. Its output goes to files, so a run
/// that hangs is killed (with everything it started) and the test fails showing what it had
/// printed, where it waited and what the server's log and processes were.
pub(crate) async fn run_bounded(
    mut command: tokio::process::Command,
    limit: Duration,
    server: &common::Server,
) -> Ran {
    let out = tempfile::tempdir().unwrap();
    let (stdout, stderr) = (out.path().join("stdout"), out.path().join("stderr"));
    let file = |path: &Path| Stdio::from(std::fs::File::create(path).unwrap());
    let mut child = command
        .stdin(Stdio::null())
        .stdout(file(&stdout))
        .stderr(file(&stderr))
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("start the tool");
    let pid = child.id().expect("a running child");
    let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
    match tokio::time::timeout(limit, child.wait()).await {
        Ok(status) => Ran {
            success: status.expect("wait for the tool").success(),
            stdout: read(&stdout),
            stderr: read(&stderr),
        },
        Err(_) => {
            let waits = testkit::stacks(pid);
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let printed = read(&stdout);
            let tail: Vec<&str> = printed.lines().rev().take(40).collect();
            panic!(
                "still running after {limit:?}; the end of what it printed:\n{}\n{}\nwhere it waited:\n{waits}\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
                read(&stderr),
                server.diagnosis()
            );
        }
    }
}

#[tokio::test]
async fn a_nul_byte_in_a_command_is_422_not_a_spawn_failure() {
    let server = common::start().await;
    let (status, body) = server.call("bash", json!({"cmd": "echo a\u{0}b"})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["type"], "invalid_arguments");
    assert!(common::error_message(&body).starts_with("cmd:"), "{body}");
    let cmd = &document()["components"]["schemas"]["BashArgs"]["properties"]["cmd"];
    assert_eq!(cmd["minLength"], 1, "{cmd}");
    assert!(
        cmd["pattern"].as_str().unwrap().contains("\\u0000"),
        "{cmd}"
    );
}

#[tokio::test]
async fn an_empty_archive_is_refused_and_the_workspace_kept() {
    let server = common::start().await;
    std::fs::write(server.path("keep.txt"), "kept").unwrap();
    for content_type in [None, Some("application/x-tar")] {
        let mut request = server.request(reqwest::Method::PUT, "/v1/workspace/archive");
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let (status, body) = request.answer().await;
        assert_eq!(status, 422, "{content_type:?}");
        assert_eq!(body["error"]["type"], "invalid_arguments", "{body}");
        assert_eq!(
            std::fs::read_to_string(server.path("keep.txt")).unwrap(),
            "kept"
        );
    }
    let body = &document()["paths"]["/v1/workspace/archive"]["put"]["requestBody"];
    assert_eq!(body["required"], true, "{body}");
}

/// Each constraint the server checks is in the schema: what the schema refuses, the server
/// refuses; what it allows (a whole number written `5.0`, `timeout: null`), the server takes.
#[tokio::test]
async fn the_schema_holds_the_constraints_the_server_checks() {
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    for (schema, field) in [
        ("BashArgs", "cmd"),
        ("ReadFileArgs", "path"),
        ("WriteFileArgs", "path"),
        ("SearchReplaceArgs", "path"),
        ("SearchReplaceArgs", "search"),
    ] {
        assert_eq!(
            schemas[schema]["properties"][field]["minLength"], 1,
            "{schema}.{field}"
        );
    }
    let timeout = &schemas["BashArgs"]["properties"]["timeout"];
    assert_eq!(timeout["type"], json!(["integer", "null"]), "{timeout}");
    let server = common::start().await;
    for (tool, args) in [
        ("bash", json!({"cmd": ""})),
        ("read_file", json!({"path": ""})),
        ("write_file", json!({"path": "", "content": "x"})),
        (
            "search_replace",
            json!({"path": "a", "search": "", "replace": "b"}),
        ),
        ("read_file", json!({"path": "a", "limit": 2.5})),
    ] {
        let (status, body) = server.call(tool, args.clone()).await;
        assert_eq!(status, 422, "{tool} {args}: {body}");
    }
    std::fs::write(server.path("a.txt"), "1\n2\n3\n").unwrap();
    let read = server
        .ok(
            "read_file",
            json!({"path": "a.txt", "limit": 2.0, "offset": null}),
        )
        .await;
    assert_eq!(read["lines_returned"], 2, "{read}");
    let run = server
        .ok("bash", json!({"cmd": "echo ok", "timeout": null}))
        .await;
    assert_eq!(run["stdout"], "ok\n", "{run}");
    env_names_are_what_the_document_says(&doc, &server).await;
}

/// A process's `env`: the document's name pattern is the server's check, and a refused name
/// is a 422 whichever way it fails.
async fn env_names_are_what_the_document_says(doc: &Value, server: &common::Server) {
    let env = &doc["components"]["schemas"]["StartProcessRequest"]["properties"]["env"];
    let pattern = env["propertyNames"]["pattern"]
        .as_str()
        .expect("a name pattern");
    let names = python_pattern(pattern);
    for (i, (name, valid)) in [
        ("PATH_2", true),
        ("_x", true),
        ("2X", false),
        ("A-B", false),
        ("SANDBOX_CALL_ID", false),
        ("SANDBOX_SERVER_ID", false),
        ("SANDBOX_CALL_IDS", true),
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(names(name), valid, "{name} by {pattern}");
        let body = json!({"id": format!("env-{i}"), "cmd": "true", "env": {name: "v"}});
        let response = server
            .request(reqwest::Method::POST, "/v1/processes")
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        assert_eq!(status == 422, !valid, "{name}: {status}");
        if valid {
            server
                .send(reqwest::Method::DELETE, &format!("/v1/processes/env-{i}"))
                .await;
        }
    }
}

/// The document's name pattern, checked the way a JSON Schema validator would: Python's `re`
/// (the fuzzer's) judges, since the pattern uses a lookahead that Rust's `regex` lacks.
fn python_pattern(pattern: &str) -> impl Fn(&str) -> bool {
    let pattern = pattern.to_owned();
    move |name: &str| {
        let output = Command::new("python3")
            .args([
                "-c",
                "import re, sys; sys.exit(0 if re.search(sys.argv[1], sys.argv[2]) else 1)",
            ])
            .arg(&pattern)
            .arg(name)
            .output()
            .expect("run python3");
        output.status.success()
    }
}

#[tokio::test]
async fn query_parameters_are_documented_as_the_server_reads_them() {
    let doc = document();
    let put = &doc["paths"]["/v1/files/{path}"]["put"];
    let mode = common::item(&put["parameters"], "name", "mode");
    assert_eq!(mode["schema"]["pattern"], "^[0-7]{3,4}$", "{mode}");
    assert_eq!(
        put["requestBody"]["required"], false,
        "no body is an empty file"
    );
    let changes = &doc["paths"]["/v1/workspace/changes"]["get"]["parameters"][0];
    assert_eq!(
        (&changes["name"], &changes["required"]),
        (&json!("since"), &json!(true))
    );
    let server = common::start().await;
    for (uri, expected) in [
        ("/v1/files/a.txt?mode=", 422),
        ("/v1/files/a.txt?mode=6", 422),
        ("/v1/files/a.txt?mode=%2B644", 422),
        ("/v1/files/a.txt?mode=0640", 201),
    ] {
        let response = server
            .request(reqwest::Method::PUT, uri)
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), expected, "{uri}");
    }
    let (status, body) = server.get_json("/v1/workspace/changes").await;
    assert_eq!(
        (status, &body["error"]["type"]),
        (422, &json!("invalid_arguments"))
    );
}

/// Byte bodies are binary strings with their media types, never JSON arrays of numbers.
#[test]
fn byte_bodies_are_binary_strings() {
    let doc = document();
    for (pointer, media_type) in [
        (
            "/paths/~1v1~1files~1{path}/put/requestBody",
            "application/octet-stream",
        ),
        (
            "/paths/~1v1~1files~1{path}/get/responses/200",
            "application/octet-stream",
        ),
        (
            "/paths/~1v1~1workspace~1archive/put/requestBody",
            "application/x-tar",
        ),
        (
            "/paths/~1v1~1workspace~1archive/put/requestBody",
            "application/octet-stream",
        ),
        (
            "/paths/~1v1~1workspace~1archive/get/responses/200",
            "application/x-tar",
        ),
        (
            "/paths/~1v1~1artifacts~1{id}/get/responses/200",
            "application/octet-stream",
        ),
        (
            "/paths/~1v1~1blobs~1{sha256}/get/responses/200",
            "application/octet-stream",
        ),
    ] {
        let schema = &doc.pointer(pointer).unwrap()["content"][media_type]["schema"];
        assert_eq!(
            (&schema["type"], &schema["format"]),
            (&json!("string"), &json!("binary")),
            "{pointer} {media_type}: {schema}"
        );
    }
}

/// A content type a client does not declare it can read is not forced on it; a wildcard gets tar.
#[tokio::test]
async fn the_archive_is_labelled_as_the_client_accepts() {
    let server = common::start().await;
    for (accept, expected) in [
        (None, "application/x-tar"),
        (Some("*/*"), "application/x-tar"),
        (Some("application/octet-stream"), "application/octet-stream"),
        (
            Some("application/x-tar, application/octet-stream"),
            "application/x-tar",
        ),
    ] {
        let mut request = server.request(reqwest::Method::GET, "/v1/workspace/archive");
        if let Some(accept) = accept {
            request = request.header("accept", accept);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.headers()["content-type"], expected, "{accept:?}");
    }
}

/// A response that is not JSON (axum's own rejections) is rewritten as the error body.
#[tokio::test]
async fn every_error_answer_is_the_json_error_body() {
    let server = common::start().await;
    let (status, body) = server
        .request(reqwest::Method::PUT, "/v1/files/a.txt?mode=0644&mode=0600")
        .body("x")
        .answer()
        .await;
    assert!((400..500).contains(&status), "{status}");
    assert!(body["error"]["message"].as_str().is_some(), "{body}");
}

#[tokio::test]
#[cfg_attr(
    not(harness_schemathesis),
    ignore = "needs HARNESS_TEST_SCHEMATHESIS=PATH (bash .ci/run sets it up)"
)]
async fn schemathesis_finds_nothing() {
    let st = testkit::gates::value("HARNESS_TEST_SCHEMATHESIS");
    let server = common::start_with_token().await;
    let reports = tempfile::tempdir().unwrap();
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemathesis");
    let mut command = tokio::process::Command::new(st);
    command
        .current_dir(&folder)
        .env("SANDBOX_URL", &server.base)
        .env("SANDBOX_TOKEN", TOKEN)
        .env("SCHEMATHESIS_REPORT_DIR", reports.path())
        .args(["--config-file", "schemathesis.toml", "run"])
        .arg(format!("{}/openapi.json", server.base))
        // Bounded by count, not time: `--max-time` makes fuzzing repeat until the budget is
        // spent, which on a slow machine left the stateful phase no time at all. The run takes
        // under a minute here; the limit is for a run that hangs.
        .args(["--max-examples", "100", "--seed", "1"]);
    let ran = run_bounded(command, Duration::from_secs(900), &server).await;
    let text = ran.stdout;
    let summary = text.lines().rev().take(30).collect::<Vec<_>>();
    common::report(&summary.into_iter().rev().collect::<Vec<_>>().join("\n"));
    assert!(
        ran.success,
        "schemathesis found something:\n{text}{}",
        ran.stderr
    );
    assert!(
        text.contains("Tested: 37"),
        "every operation tested:\n{text}"
    );
}

#[tokio::test]
#[cfg_attr(
    not(harness_openapi_client),
    ignore = "needs HARNESS_TEST_OPENAPI_CLIENT=PATH (bash .ci/run sets it up)"
)]
async fn a_generated_client_drives_every_route() {
    let generator = testkit::gates::value("HARNESS_TEST_OPENAPI_CLIENT");
    let python = Path::new(&generator).with_file_name("python");
    let out = tempfile::tempdir().unwrap();
    let package = out.path().join("sandbox_api");
    let generated = Command::new(&generator)
        .args(["generate", "--meta", "none", "--path"])
        .arg(repo_root().join("proto-docs/openapi.json"))
        .arg("--output-path")
        .arg(&package)
        .output()
        .expect("run openapi-python-client");
    let log = String::from_utf8_lossy(&generated.stdout);
    assert!(generated.status.success(), "{log}");
    for dropped in ["will not be generated", "will be omitted"] {
        assert!(
            !log.contains(dropped),
            "the generator dropped something:\n{log}"
        );
    }
    // Every tool the document describes, the opt-in ones included.
    let server = common::start_with_token_and_args([
        "--tools",
        "bash,read_file,write_file,search_replace,exec,write_stdin,shell",
    ])
    .await;
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/client/drive.py");
    let mut command = tokio::process::Command::new(python);
    command
        .arg(driver)
        .arg(&package)
        .arg(&server.base)
        .arg(TOKEN);
    let ran = run_bounded(command, Duration::from_secs(180), &server).await;
    let text = ran.stdout;
    assert!(ran.success, "{text}{}", ran.stderr);
    assert!(text.contains("42 operations called"), "{text}");
}
