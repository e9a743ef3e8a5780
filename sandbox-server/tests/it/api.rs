use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::common;

#[tokio::test]
async fn health_needs_no_token_and_info_describes_the_server() {
    let server = common::start_with_token().await;
    let health: Value = reqwest::get(format!("{}/healthz", server.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    let names: Vec<&str> = health["protections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "process_group",
            "clean_environment",
            "resource_limits",
            "unprivileged_user",
            "not_dumpable",
            "pid_namespace",
            "landlock",
            "signal_scope",
            "devices",
            "hidden_home",
            "network_none",
            "no_set_id",
            "network_namespace",
            "cgroup"
        ]
    );

    let (status, info) = server.get_json("/v1/info").await;
    assert_eq!(status, 200);
    assert_eq!(
        info["tools"],
        json!(["bash", "read_file", "write_file", "search_replace"])
    );
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        info["workspace_root"].as_str().unwrap(),
        server
            .workspace
            .path()
            .canonicalize()
            .unwrap()
            .to_str()
            .unwrap()
    );
    assert_eq!(info["limits"]["output_limit_chars"], 25_000);
    assert_eq!(info["limits"]["max_timeout_secs"], 3600);
    assert_eq!(info["limits"]["artifact_cap_bytes"], 64 << 20);
}

#[tokio::test]
async fn tools_are_listed_in_registration_order_with_their_schemas() {
    let server = common::start_with_args(["--tools", "search_replace,bash,read_file"]).await;
    let (status, tools) = server.get_json("/v1/tools").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bash", "read_file", "search_replace"]);
    let bash = &tools[0];
    assert_eq!(
        bash["description"],
        "Run a shell command from the working directory. Timeout is in seconds (max 3600)."
    );
    let parameters = &bash["parameters"];
    assert_eq!(parameters["type"], "object");
    assert_eq!(parameters["required"], json!(["cmd"]));
    assert_eq!(parameters["additionalProperties"], false);
    assert_eq!(parameters["properties"]["cmd"]["type"], "string");
    assert_eq!(
        parameters["properties"]["timeout"]["type"],
        json!(["integer", "null"])
    );
    assert_eq!(parameters["properties"]["timeout"]["minimum"], 1);
    assert_eq!(parameters["properties"]["timeout"]["maximum"], 3600);
    assert!(
        parameters.get("example").is_none(),
        "examples are not for the model"
    );

    let (status, body) = server
        .call("write_file", json!({"path": "x", "content": ""}))
        .await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "unknown_tool");
    assert!(
        common::error_message(&body).contains("not enabled"),
        "{body}"
    );
}

#[tokio::test]
async fn openapi_has_one_operation_per_tool_and_every_route() {
    let server = common::start().await;
    let (status, spec) = server.get_json("/openapi.json").await;
    assert_eq!(status, 200);
    assert_eq!(spec["openapi"], "3.1.0");
    let paths = spec["paths"].as_object().unwrap();
    for path in [
        "/healthz",
        "/v1/info",
        "/v1/tools",
        "/v1/tools/bash",
        "/v1/tools/read_file",
        "/v1/tools/write_file",
        "/v1/tools/search_replace",
        "/v1/processes",
        "/v1/processes/{id}",
        "/v1/processes/{id}/output",
        "/v1/processes/{id}/events",
        "/v1/processes/{id}/pty",
        "/v1/processes/{id}/stdin",
        "/v1/processes/{id}/signal",
        "/v1/processes/{id}/resize",
        "/v1/shells",
        "/v1/shells/{id}/run",
        "/v1/shells/{id}/interrupt",
        "/v1/artifacts/{id}",
        "/v1/files/{path}",
        "/v1/dirs/{path}",
    ] {
        assert!(paths.contains_key(path), "missing {path}");
    }
    let bash = &spec["paths"]["/v1/tools/bash"]["post"];
    assert_eq!(bash["operationId"], "bash");
    assert_eq!(
        bash["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/BashArgs"
    );
    assert_eq!(
        bash["responses"]["200"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/BashResultWithStep"
    );
    let answer = &spec["components"]["schemas"]["BashResultWithStep"]["allOf"];
    assert_eq!(answer[0]["$ref"], "#/components/schemas/BashResult");
    assert_eq!(
        answer[1]["properties"]["step"]["$ref"],
        "#/components/schemas/ToolStep"
    );
    for status in ["401", "403", "404", "413", "422", "429", "500"] {
        assert_eq!(
            bash["responses"][status]["content"]["application/json"]["schema"]["$ref"],
            "#/components/schemas/ErrorResponse",
            "{status}"
        );
    }
    let schemas = spec["components"]["schemas"].as_object().unwrap();
    for name in [
        "BashArgs",
        "BashResult",
        "Artifact",
        "ReadFileArgs",
        "ReadFileResult",
        "ErrorResponse",
        "ErrorBody",
    ] {
        assert!(schemas.contains_key(name), "missing schema {name}");
    }
    assert_eq!(
        spec["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    assert_eq!(spec["paths"]["/healthz"]["get"]["security"], json!([{}]));
}

#[tokio::test]
async fn docs_page_is_served_without_any_external_asset() {
    let server = common::start().await;
    let response = reqwest::get(format!("{}/docs", server.base)).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let html = response.text().await.unwrap();
    assert!(html.contains("/openapi.json"));
    // Everything it needs is inline: no script, style or font from another origin.
    for needle in ["src=\"http", "href=\"http", "@import", "cdn"] {
        assert!(!html.contains(needle), "docs page references {needle}");
    }
}

/// The page as a browser renders it: one entry per operation, `code` spans as <code> (no
/// literal backticks), every parameter with where it goes.
#[tokio::test]
#[cfg_attr(
    not(harness_browser),
    ignore = "needs HARNESS_TEST_BROWSER=1 (bash .ci/run sets it up)"
)]
async fn docs_page_renders_every_operation_in_a_browser() {
    let server = common::start().await;
    let (_, spec) = server.get_json("/openapi.json").await;
    let operations: usize = spec["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    let profile = tempfile::tempdir().unwrap();
    let dom = testkit::stdout_of(
        std::process::Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
            ])
            .args([
                "--disable-background-networking",
                "--virtual-time-budget=5000",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("--dump-dom")
            .arg(format!("{}/docs", server.base)),
    );
    assert_eq!(dom.matches("<details>").count(), operations, "{dom}");
    assert!(dom.contains("<code>"), "{dom}");
    for summary in dom.split("<span class=\"muted\">").skip(1) {
        let text = summary.split("</span>").next().unwrap();
        assert!(!text.contains('`'), "a literal backtick: {text}");
    }
    assert!(
        dom.contains("placeholder=\"header, optional\""),
        "Idempotency-Key is a header"
    );
}
