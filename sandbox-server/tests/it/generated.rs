use std::process::Command;

use testkit::{ensure_file_contents, repo_root};

use crate::common;

#[test]
fn committed_openapi_document_is_current() {
    let output = Command::new(common::binary())
        .arg("print-openapi")
        .output()
        .unwrap();
    assert!(output.status.success());
    let generated = String::from_utf8(output.stdout).unwrap();
    ensure_file_contents(&repo_root().join("proto-docs/openapi.json"), &generated);
}

/// Every ```sh block in proto-docs/curl.md runs, in order, in one shell against a live server
/// with a token, and its output contains each `# => text` line the block promises.
#[tokio::test]
async fn curl_examples_work_against_a_live_server() {
    let server = common::start_with_token().await;
    let doc = std::fs::read_to_string(repo_root().join("proto-docs/curl.md")).unwrap();
    let mut blocks: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        match (&mut current, line.trim_start()) {
            (None, "```sh") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    assert!(blocks.len() >= 10, "found only {} examples", blocks.len());

    // The folder the page asks the reader to set once, `DEMO`; no example writes elsewhere.
    let demo = tempfile::tempdir().unwrap();
    let mut script = String::from("set -u\n");
    for (idx, block) in blocks.iter().enumerate() {
        script.push_str(&format!("echo '@@@ block {idx}'\n{block}\necho\n"));
    }
    let output = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(server.workspace.path())
        .env("SANDBOX", &server.base)
        .env("TOKEN", common::TOKEN)
        .env("DEMO", demo.path())
        // The TLS examples start servers of their own, by name.
        .env("PATH", {
            let bin = common::binary();
            let dir = bin.parent().unwrap().display().to_string();
            format!("{dir}:{}", std::env::var("PATH").unwrap_or_default())
        })
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "curl examples failed:\n{stdout}\n{stderr}"
    );
    // A server an example starts logs to a file, not between the examples' output.
    assert!(
        !stderr.contains("sandbox_server"),
        "a server's log reached the terminal:\n{stderr}"
    );
    let outputs: Vec<&str> = stdout.split("@@@ block ").skip(1).collect();
    assert_eq!(outputs.len(), blocks.len());
    for (block, out) in blocks.iter().zip(outputs) {
        assert!(
            block.contains("curl"),
            "every example is a curl call:\n{block}"
        );
        assert!(
            !block.contains("/tmp/"),
            "an example writes under \"$DEMO\", not /tmp:\n{block}"
        );
        let expectations: Vec<&str> = block
            .lines()
            .filter_map(|l| l.trim().strip_prefix("# => "))
            .collect();
        assert!(
            !expectations.is_empty(),
            "example without a `# =>` expectation:\n{block}"
        );
        for expected in expectations {
            assert!(
                out.contains(expected),
                "example:\n{block}\nprinted:\n{out}\nwithout {expected:?}"
            );
        }
    }
}
