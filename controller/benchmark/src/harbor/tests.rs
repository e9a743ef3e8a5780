use super::*;

fn task(toml: &str, instruction: &str) -> TaskResult<BenchTask> {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let files = [
        ("environment/Dockerfile", "FROM x\n"),
        ("tests/test.sh", "true\n"),
        ("task.toml", toml),
        ("instruction.md", instruction),
    ];
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    load(root, "t", &crate::HostVars::none())
}

#[test]
fn task_files_are_read_leniently_with_harbor_0_1_defaults() {
    let t = task(
        "version = \"1.0\"\nfuture_key = 1\n[agent]\ntimeout_sec = 90\n[environment]\nmemory = \"4G\"\nallow_internet = false\nshiny = true\n[verifier.env]\nA = \"${HARNESS_SURELY_UNSET:-fallback}\"\n",
        "<!-- harbor-canary GUID x -->\n\n# Task\nDo it.\n",
    )
    .unwrap();
    assert_eq!(t.instruction, "# Task\nDo it.");
    assert_eq!(t.agent_timeout, std::time::Duration::from_secs(90));
    assert_eq!(t.verifier_timeout, DEFAULT_VERIFIER_TIMEOUT);
    assert_eq!(
        (t.resources.cpus, t.resources.memory_mb),
        (Some(1.0), Some(4096))
    );
    assert_eq!(t.network.agent, crate::NetworkPolicy::NoNetwork);
    assert_eq!(t.verifier_env["A"], "fallback");
    assert!(t.solution.is_none());
    let warned = t.warnings.join("\n");
    assert!(
        warned.contains("future_key") && warned.contains("environment.shiny"),
        "{warned}"
    );
    assert!(t.digest.starts_with("sha256:") && t.digest.len() == 71);
}

#[test]
fn what_cannot_run_is_refused_by_name() {
    let err = task("[environment]\nos = \"windows\"\n", "x").unwrap_err();
    assert!(format!("{err}").contains("only Linux"), "{err}");
    let err = task("[agent]\ntimeout_sec = \"soon\"\n", "x").unwrap_err();
    assert!(format!("{err}").contains("agent.timeout_sec"), "{err}");
    let err = task("[[steps]]\nname = \"a\"\n", "x").unwrap_err();
    assert!(format!("{err}").contains("no folder steps/a/"), "{err}");
    let err = task("x = [", "x").unwrap_err();
    assert!(format!("{err}").contains("not valid TOML"), "{err}");
}
