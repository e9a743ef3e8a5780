//! deploy/'s monitoring: every pod that says "scrape me" serves its metrics on the port it
//! names, the headless Services Prometheus discovers reach that port, and Prometheus's own
//! tools accept the example config and pass the recording rules' unit tests.

use std::process::Command;

use serde_json::Value;

use crate::deploy::{deploy, find, render};

/// The port a `host:port` address names.
fn port_of(address: &str) -> &str {
    address.rsplit(':').next().unwrap_or_default()
}

/// Checks a pod template's scrape annotations against its containers, and returns the port.
fn scraped_port(template: &Value) -> String {
    let annotations = &template["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    let port = annotations["prometheus.io/port"]
        .as_str()
        .unwrap()
        .to_owned();
    let declared = template["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
        .any(|p| p["name"] == "metrics" && p["containerPort"].as_u64() == port.parse().ok());
    assert!(declared, "no container port `metrics` {port}");
    port
}

#[test]
#[cfg_attr(
    not(harness_deploy),
    ignore = "needs HARNESS_TEST_DEPLOY=1 (bash .ci/run sets it up)"
)]
fn every_scraped_pod_serves_metrics_where_it_says() {
    // The standalone sandbox: --metrics-listen (by its variable) on the annotated port.
    let (_, docs) = render("sandbox");
    let template = &find(&docs, "Deployment", "sandbox")["spec"]["template"];
    let port = scraped_port(template);
    let env = template["spec"]["containers"][0]["env"].as_array().unwrap();
    let listen = env
        .iter()
        .find(|e| e["name"] == "SANDBOX_METRICS_LISTEN")
        .expect("the sandbox serves metrics on their own address");
    assert_eq!(port_of(listen["value"].as_str().unwrap()), port);
    let service = &find(&docs, "Service", "sandbox-metrics")["spec"];
    assert_eq!(service["clusterIP"], "None");
    assert_eq!(service["ports"][0]["port"].to_string(), port);
    let policy = &find(&docs, "NetworkPolicy", "sandbox")["spec"];
    let admitted = policy["ingress"].as_array().unwrap().iter().any(|rule| {
        rule["from"][0]["podSelector"]["matchLabels"]["agent-harness/role"] == "monitoring"
            && rule["ports"][0]["port"].as_u64() == port.parse().ok()
    });
    assert!(admitted, "the NetworkPolicy admits monitoring on {port}");

    // The evaluation Job: the controller's --metrics-listen on the annotated port.
    let (_, docs) = render("evaluation");
    let template = &find(&docs, "Job", "harness-eval")["spec"]["template"];
    let port = scraped_port(template);
    let args: Vec<&str> = template["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let at = args
        .iter()
        .position(|a| *a == "--metrics-listen")
        .expect("--metrics-listen");
    assert_eq!(port_of(args[at + 1]), port);
    let service = &find(&docs, "Service", "harness-eval-metrics")["spec"];
    assert_eq!(service["clusterIP"], "None");
    assert_eq!(service["ports"][0]["targetPort"].to_string(), port);
    assert_eq!(
        service["selector"]["app.kubernetes.io/name"],
        template["metadata"]["labels"]["app.kubernetes.io/name"]
    );

    // A benchmark trial's pod: `--metrics-listen=ADDR` on the annotated port, found through the
    // tasks' namespace's headless Service, admitted by the task's NetworkPolicy.
    let (_, docs) = render("benchmark");
    let template = &find(&docs, "Job", "harness-task")["spec"]["template"];
    let port = scraped_port(template);
    let listen = template["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find_map(|a| a.strip_prefix("--metrics-listen="))
        .expect("--metrics-listen=ADDR");
    assert_eq!(port_of(listen), port);
    let policy = &find(&docs, "NetworkPolicy", "harness-task")["spec"];
    let admitted = policy["ingress"][0]["ports"][0]["port"].as_u64() == port.parse().ok();
    assert!(
        admitted,
        "the task's NetworkPolicy admits monitoring on {port}"
    );
    let (_, namespace) = render("benchmark-namespace");
    let service = &find(&namespace, "Service", "harness-task-metrics")["spec"];
    assert_eq!(service["clusterIP"], "None");
    assert_eq!(
        service["ports"][0]["targetPort"].as_u64(),
        port.parse().ok()
    );
    assert_eq!(
        service["selector"]["app.kubernetes.io/name"],
        template["metadata"]["labels"]["app.kubernetes.io/name"]
    );
}

#[test]
#[cfg_attr(
    not(harness_prometheus),
    ignore = "needs HARNESS_TEST_PROMETHEUS=1 (bash .ci/run sets it up)"
)]
fn prometheus_accepts_the_config_and_the_rules_pass_their_tests() {
    let folder = deploy().join("monitoring");
    for args in [
        vec!["check", "config", "prometheus.yml"],
        vec!["check", "rules", "rules.yml"],
        vec!["test", "rules", "rules.test.yml"],
    ] {
        let output = Command::new("promtool")
            .args(&args)
            .current_dir(&folder)
            .output()
            .expect("run promtool");
        assert!(
            output.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
