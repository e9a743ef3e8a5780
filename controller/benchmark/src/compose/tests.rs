//! The compose subset: reading, variables, and what a hostile task may not do (issue 24 §3).
use super::*;

#[test]
fn variables_and_words() {
    let vars = BTreeMap::from([("A".to_owned(), "1".to_owned())]);
    assert_eq!(
        interpolate("x=${A} y=$A z=${B:-d} w=$$HOME", &vars),
        "x=1 y=1 z=d w=$HOME"
    );
    assert_eq!(
        split_words(r#"sh -c "echo 'a b'" c"#).unwrap(),
        ["sh", "-c", "echo 'a b'", "c"]
    );
}

#[test]
fn a_compose_file_is_read_and_unsupported_keys_are_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("api")).unwrap();
    std::fs::write(dir.path().join("api/Dockerfile"), "FROM x\n").unwrap();
    let file = dir.path().join("docker-compose.yaml");
    std::fs::write(
        &file,
        "services:\n  main:\n    depends_on:\n      api:\n        condition: service_healthy\n    environment:\n      - K=${A}\n  api:\n    build: ./api\n    healthcheck:\n      test: [\"CMD\", \"true\"]\n      interval: 1s\n",
    )
    .unwrap();
    let vars = BTreeMap::from([("A".to_owned(), "v".to_owned())]);
    let compose = load(&file, &vars, dir.path()).unwrap();
    assert_eq!(
        compose.services["main"].depends_on,
        [("api".to_owned(), Condition::Healthy)]
    );
    assert_eq!(compose.services["main"].environment["K"], "v");
    assert_eq!(
        compose.services["api"]
            .healthcheck
            .as_ref()
            .unwrap()
            .interval,
        Some(Duration::from_secs(1))
    );
    std::fs::write(
        &file,
        "services:\n  main:\n    image: x\n    secrets: [a]\n",
    )
    .unwrap();
    let err = format!("{}", load(&file, &vars, dir.path()).unwrap_err());
    assert!(
        err.contains("services.main.secrets: not supported"),
        "{err}"
    );
}

/// Issue 24 §3: binds and build contexts stay in the task's folder, read-only, never a socket
/// or a device; `${VAR}` is the task's or the operator's, never the rest of the host's.
#[test]
fn a_task_reaches_nothing_of_the_host_through_its_compose_file() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("task");
    let env = task.join("environment");
    std::fs::create_dir_all(env.join("data")).unwrap();
    std::fs::write(env.join("Dockerfile"), "FROM x\n").unwrap();
    let outside = dir.path().join("secret");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, env.join("leak")).unwrap();
    let socket = env.join("engine.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let file = env.join("docker-compose.yaml");
    let attempt = |volume: &str| {
        std::fs::write(
            &file,
            format!("services:\n  main:\n    build: .\n    volumes:\n      - \"{volume}\"\n"),
        )
        .unwrap();
        load(&file, &BTreeMap::new(), &task).map(|c| c.services["main"].binds.clone())
    };
    for refused in [
        "/:/host",
        "/var/run/docker.sock:/var/run/docker.sock",
        "./leak:/leak",
        "../..:/up",
        "./engine.sock:/e.sock",
        "./data:/data:rw",
    ] {
        let err = format!("{}", attempt(refused).unwrap_err());
        assert!(
            err.contains(refused.split(':').next().unwrap()),
            "{refused}: {err}"
        );
    }
    let kept = attempt("./data:/data").unwrap();
    assert_eq!(
        kept,
        [format!(
            "{}:/data:ro",
            env.join("data").canonicalize().unwrap().display()
        )]
    );
    // A build context outside the task, or through a link out of it.
    for context in ["..", "../..", "./leak"] {
        std::fs::write(&file, format!("services:\n  main:\n    build: {context}\n")).unwrap();
        if context == "./leak" {
            std::fs::write(outside.join("Dockerfile"), "FROM x\n").unwrap();
        }
        let result = load(&file, &BTreeMap::new(), &env);
        assert!(result.is_err(), "{context}: {result:?}");
    }
    // Variables: the host's key is not the task's; its .env and the harness's are.
    let key = std::env::var("PATH").unwrap();
    std::fs::write(env.join(".env"), "FROM_DOT_ENV=\"yes\"\n# a comment\n").unwrap();
    std::fs::write(
        &file,
        "services:\n  main:\n    image: x\n    environment:\n      K: \"${PATH}\"\n      D: \"${FROM_DOT_ENV}\"\n      H: \"${FROM_HARNESS}\"\n",
    )
    .unwrap();
    let vars = BTreeMap::from([("FROM_HARNESS".to_owned(), "h".to_owned())]);
    let compose = load(&file, &vars, &task).unwrap();
    let environment = &compose.services["main"].environment;
    assert_ne!(environment["K"], key);
    assert_eq!(environment["K"], "");
    assert_eq!(environment["D"], "yes");
    assert_eq!(environment["H"], "h");
}
