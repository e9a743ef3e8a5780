use super::*;

/// A task file holding `task` in a fresh folder, and flags with `adjust` applied.
fn resolve(task: &str, adjust: impl FnOnce(&mut SessionFlags)) -> Result<RunConfig, InputError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("task.yaml");
    std::fs::write(&path, task).unwrap();
    let mut flags = flags();
    adjust(&mut flags);
    RunConfig::new(TaskFile::load(&path)?, None, &flags)
}

/// The flags as `harness run` parses an empty command line.
pub(crate) fn flags() -> SessionFlags {
    SessionFlags {
        model: None,
        base_url: None,
        reasoning_effort: None,
        web_search: false,
        price: None,
        max_turns: None,
        max_cost: None,
        compact_at: None,
        sandbox: None,
        image: None,
        memory: None,
        cpus: None,
        pids: None,
        lifetime: None,
        sandbox_token_file: None,
        sandbox_tls: Default::default(),
        network: None,
        writable: Vec::new(),
        run_as: None,
        keep_workspace: false,
        tools: None,
        policy: None,
        hooks: None,
        mcp: None,
        mcp_workspace: false,
        classifier_model: None,
        classifier_timeout: Duration::from_secs(60),
        no_classifier: false,
        approve: Approve::Ask,
        max_tokens: None,
        thinking_budget: None,
        agents: crate::subagent::AgentFlags::default(),
    }
}

#[test]
fn a_docker_sandbox_takes_its_limits_from_the_task_and_the_flags() {
    let config = resolve(
        "prompt: p\nnetwork: host\nsandbox: {provider: docker, memory: 2g, cpus: 1.5, lifetime: 30m}\n",
        |flags| flags.pids = Some(256),
    )
    .unwrap();
    let SandboxTarget::Docker(spec) = config.sandbox else {
        panic!("{:?}", config.sandbox)
    };
    assert_eq!(spec.memory, Some(2 << 30));
    assert_eq!(spec.cpus, Some(1.5));
    assert_eq!(spec.pids, Some(256));
    assert_eq!(spec.network, NetworkMode::Host);
    assert_eq!(spec.lifetime, Some(std::time::Duration::from_secs(1800)));
    assert_eq!(config.lifetime, spec.lifetime);
    // The flag wins over the task's provider.
    let config = resolve("prompt: p\nsandbox: {provider: docker}\n", |flags| {
        flags.sandbox = Some("local".to_owned())
    });
    assert_eq!(config.unwrap().sandbox, SandboxTarget::Local);
}

#[test]
fn container_limits_outside_docker_and_bad_values_are_named() {
    let err = resolve("prompt: p\n", |flags| flags.memory = Some("1g".to_owned())).unwrap_err();
    assert!(
        err.to_string().contains("memory") && err.to_string().contains("--sandbox docker"),
        "{err}"
    );
    let err = resolve(
        "prompt: p\nsandbox: {provider: docker, memory: lots}\n",
        |_| {},
    );
    assert!(err.unwrap_err().to_string().contains("`lots`"));
    let err = resolve("prompt: p\nsandbox: {lifetime: soon}\n", |_| {});
    assert!(
        err.unwrap_err()
            .to_string()
            .contains("sandbox.lifetime `soon`")
    );
    let err = resolve("prompt: p\nsandbox: {provider: docker}\n", |flags| {
        flags.pids = Some(2)
    });
    assert!(err.unwrap_err().to_string().contains("pids: 2"));
    let err = resolve("prompt: p\nsandbox: {provider: vm}\n", |_| {});
    assert!(
        err.unwrap_err()
            .to_string()
            .contains("sandbox.provider: expected")
    );
    let err = resolve("prompt: p\nnetwork: wide\n", |_| {});
    assert!(
        err.unwrap_err()
            .to_string()
            .contains("network: expected `none` or `host`, got `wide`")
    );
}
