//! A benchmark task is untrusted input (issue 24 §3): with a real Docker engine, a task's own
//! entrypoint runs after the injected server has read and deleted its token, and a task's
//! compose file gets none of this machine's variables.

use std::path::Path;
use std::time::Duration;

use crate::common;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    if path.extension().is_some_and(|e| e == "sh") {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// A Harbor task whose image has an entrypoint that tries to steal the server's token, and
/// whose compose file asks for the harness's API key: its verifier passes only when neither
/// reached the task, and its entrypoint did run.
fn hostile_task(root: &Path) {
    for (path, text) in [
        (
            "task.toml",
            "version = \"1.0\"\n[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 60.0\n[environment]\nallow_internet = false\n",
        ),
        ("instruction.md", "Write ok to /app/done.\n"),
        (
            "environment/Dockerfile",
            "FROM agent-harness/base:bookworm\nWORKDIR /app\nCOPY steal.sh /steal.sh\nENTRYPOINT [\"/steal.sh\"]\nCMD [\"sleep\", \"600\"]\n",
        ),
        (
            "environment/steal.sh",
            "#!/bin/bash\ncat /.harness/token > /tmp/stolen 2>/dev/null\nls -la /.harness > /tmp/seen 2>&1\necho ran > /tmp/entrypoint-ran\nexec \"$@\"\n",
        ),
        (
            "environment/docker-compose.yaml",
            "services:\n  main:\n    build: .\n    environment:\n      LEAKED: \"${OPENAI_API_KEY:-none}\"\n",
        ),
        ("solution/solve.sh", "#!/bin/bash\necho ok > /app/done\n"),
        (
            "tests/test.sh",
            "#!/bin/bash\n\
             stolen=$(cat /tmp/stolen 2>/dev/null)\n\
             echo \"stolen=[$stolen] leaked=[$LEAKED] ran=$(cat /tmp/entrypoint-ran 2>/dev/null)\"\n\
             if [ -z \"$stolen\" ] && [ \"$LEAKED\" = none ] && [ -f /tmp/entrypoint-ran ] && [ -f /app/done ]; then\n\
               echo 1 > /logs/verifier/reward.txt\n\
             else\n\
               echo 0 > /logs/verifier/reward.txt\n\
             fi\n",
        ),
    ] {
        write(&root.join(path), text);
    }
}

#[tokio::test]
#[cfg_attr(
    not(harness_docker),
    ignore = "needs HARNESS_TEST_DOCKER=1 (bash .ci/run sets it up)"
)]
async fn issue_24_a_tasks_entrypoint_and_compose_file_reach_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("hostile");
    hostile_task(&task);
    let logs = dir.path().join("logs");
    let mut command =
        common::command(&["run", "--task", task.to_str().unwrap(), "--agent", "oracle"]);
    command
        .env("OPENAI_API_KEY", "sk-issue24-never-in-a-task-0123456789")
        .env("CONTROLLER_LOG_DIR", &logs);
    let run = common::run(command, Duration::from_secs(600)).await;
    assert_eq!(
        run.code, 0,
        "the verifier found nothing stolen\n{}\n{}",
        run.stdout, run.stderr
    );
    let session = common::first_entry(&logs);
    // The verifier's output is in the log or its blobs.
    let found = common::files_under(&session).iter().any(|name| {
        std::fs::read(session.join(name))
            .is_ok_and(|b| String::from_utf8_lossy(&b).contains("stolen=[] leaked=[none] ran=ran"))
    });
    assert!(found, "the verifier's line is kept");
}
