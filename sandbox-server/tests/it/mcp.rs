//! The sandbox as an MCP server, driven by a client no one here wrote: the official Python MCP
//! SDK (`mcp` from PyPI, `tests/mcp/drive.py`) lists the tools, runs `bash`, reads and writes
//! files, takes a snapshot, lists changes, reads a file at a version and restores a snapshot,
//! over streamable HTTP with the token and over stdio through `sandbox-server mcp-stdio`.

use std::path::Path;
use std::time::Duration;

use crate::common::{self, TOKEN};
use crate::contract::run_bounded;

fn driver() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/drive.py")
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_mcp_python),
    ignore = "needs HARNESS_TEST_MCP_PYTHON=PATH (bash .ci/run sets it up)"
)]
async fn a_third_party_mcp_client_drives_the_sandbox_over_http_and_stdio() {
    let python = testkit::gates::value("HARNESS_TEST_MCP_PYTHON");
    let server = common::start_with_token().await;
    let mut http = tokio::process::Command::new(&python);
    http.arg(driver())
        .arg("http")
        .arg(format!("{}/mcp", server.base))
        .arg(TOKEN);
    let ran = run_bounded(http, Duration::from_secs(120), &server).await;
    assert!(ran.success, "over HTTP:\n{}\n{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains("ok: workspace_restore") && ran.stdout.ends_with("done\n"),
        "{}",
        ran.stdout
    );
    // The calls went through the same path as /v1/tools: the metrics counted them.
    let metrics = server.get_text("/metrics").await;
    assert!(
        metrics.contains(r#"sandbox_tool_calls_total{tool="bash",outcome="exit_nonzero"} 1"#),
        "{metrics}"
    );

    let workspace = tempfile::tempdir().unwrap();
    let mut stdio = tokio::process::Command::new(&python);
    stdio
        .arg(driver())
        .arg("stdio")
        .arg(common::binary())
        .arg(workspace.path());
    let ran = run_bounded(stdio, Duration::from_secs(120), &server).await;
    assert!(ran.success, "over stdio:\n{}\n{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains("ok: the stdio bridge names itself") && ran.stdout.ends_with("done\n"),
        "{}",
        ran.stdout
    );
}
