//! The standalone sandbox (`deploy/sandbox` and its TLS overlays): locked down, its token store
//! and audit log on a volume of their own, HTTPS and mutual TLS from a Secret; each given to a
//! real server where the pod would have its files.

use serde_json::Value;

use super::{find, render};
use crate::common;

/// The item of a manifest's list (`env`, `volumes`, `volumeMounts`) named `name`.
fn named<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .and_then(|items| items.iter().find(|item| item["name"] == name))
        .unwrap_or_else(|| panic!("no `{name}` in {list}"))
}

#[test]
#[cfg_attr(
    not(harness_deploy),
    ignore = "needs HARNESS_TEST_DEPLOY=1 (bash .ci/run sets it up)"
)]
fn the_standalone_sandbox_is_locked_down() {
    let (_, docs) = render("sandbox");
    let pod = &find(&docs, "Deployment", "sandbox")["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let container = &pod["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"][0],
        "ALL"
    );
    assert_eq!(container["args"], serde_json::json!(["--network", "none"]));
    let policy = &find(&docs, "NetworkPolicy", "sandbox")["spec"];
    assert_eq!(policy["egress"], serde_json::json!([]));
    assert_eq!(
        policy["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["agent-harness/role"],
        "controller"
    );
}

/// The standalone sandbox's token store and audit log, on a volume of their own, given to a
/// real server where the pod would have them: a minted token outlives a restart, and the audit
/// log has the requests.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_deploy),
    ignore = "needs HARNESS_TEST_DEPLOY=1 (bash .ci/run sets it up)"
)]
async fn the_standalone_sandbox_keeps_its_tokens_and_audits_its_requests() {
    let (_, docs) = render("sandbox");
    let pod = &find(&docs, "Deployment", "sandbox")["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let state = named(&container["volumeMounts"], "state");
    let volume = named(&pod["volumes"], "state");
    assert!(volume["emptyDir"].is_object(), "{volume}");
    let mount_path = state["mountPath"].as_str().unwrap();
    let folder = tempfile::tempdir().unwrap();
    let mut env = Vec::new();
    for name in ["SANDBOX_TOKEN_STORE", "SANDBOX_AUDIT_LOG"] {
        let value = named(&container["env"], name)["value"].as_str().unwrap();
        let file = value
            .strip_prefix(mount_path)
            .unwrap_or_else(|| panic!("{name} is not on the state volume: {value}"));
        env.push((name, format!("{}{file}", folder.path().display())));
    }
    let token = folder.path().join("root-token");
    std::fs::write(&token, "deploy-root-token-0123456789").unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let serve = || {
        let mut command = testkit::serve(common::sandbox_server(), workspace.path());
        command
            .arg("--token-file")
            .arg(&token)
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .stderr(std::process::Stdio::null());
        let (child, line) = testkit::spawn_server(&mut command);
        (child, testkit::url_of(&line))
    };
    // SIGTERM, and the exit: the audit log's last lines are written by then.
    let stop = |mut child: std::process::Child| {
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        child.wait().unwrap();
    };
    let client = reqwest::Client::new();
    let (first, url) = serve();
    let minted: serde_json::Value = client
        .post(format!("{url}/v1/tokens"))
        .bearer_auth("deploy-root-token-0123456789")
        .json(&serde_json::json!({"name": "viewer", "scopes": ["read"], "ttl_secs": 600}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let viewer = minted["token"].as_str().unwrap().to_owned();
    stop(first);
    let (second, url) = serve();
    let status = client
        .get(format!("{url}/v1/info"))
        .bearer_auth(&viewer)
        .send()
        .await
        .unwrap()
        .status();
    stop(second);
    assert_eq!(status, 200, "the minted token did not outlive the restart");
    let audit = std::fs::read_to_string(folder.path().join("audit.jsonl")).unwrap();
    let routes: Vec<String> = audit
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["route"].to_string())
        .collect();
    assert_eq!(routes, ["\"/v1/tokens\"", "\"/v1/info\""], "{audit}");
}

/// The TLS overlays' settings, given to a real server with certificate files where the Secret
/// would put them: it serves HTTPS (and requires client certificates under mTLS), and the
/// kubelet's probes can reach it.
#[test]
#[cfg_attr(
    not(harness_deploy),
    ignore = "needs HARNESS_TEST_DEPLOY=1 (bash .ci/run sets it up)"
)]
fn the_tls_overlays_start_a_server_that_speaks_tls() {
    for (dir, mutual) in [("sandbox-tls", false), ("sandbox-mtls", true)] {
        let (_, docs) = render(dir);
        let pod = &find(&docs, "Deployment", "sandbox")["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let mount = named(&container["volumeMounts"], "tls");
        let volume = named(&pod["volumes"], "tls");
        assert_eq!(volume["secret"]["secretName"], "sandbox-tls", "{dir}");
        for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
            let probe = &container[probe];
            match mutual {
                false => assert_eq!(probe["httpGet"]["scheme"], "HTTPS", "{dir}: {probe}"),
                true => assert!(probe["tcpSocket"].is_object() && probe["httpGet"].is_null()),
            }
        }
        // The Secret's files, where the kubelet would mount them.
        let secret = tempfile::tempdir().unwrap();
        let (ca, cert, key) = common::localhost_certificate();
        for (name, text) in [("ca.crt", &ca), ("tls.crt", &cert), ("tls.key", &key)] {
            std::fs::write(secret.path().join(name), text).unwrap();
        }
        let mount_path = mount["mountPath"].as_str().unwrap();
        let workspace = tempfile::tempdir().unwrap();
        let mut server = testkit::serve(common::sandbox_server(), workspace.path());
        server.stderr(std::process::Stdio::null());
        for var in container["env"].as_array().unwrap() {
            let name = var["name"].as_str().unwrap();
            let value = var["value"].as_str().unwrap_or_default();
            if let Some(file) = value.strip_prefix(mount_path) {
                let local = format!("{}{file}", secret.path().display());
                server.env(name, local);
            }
        }
        let (mut child, line) = testkit::spawn_server(&mut server);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(line["tls"], true, "{dir}: {line}");
        assert_eq!(line["mtls"], mutual, "{dir}: {line}");
    }
}
