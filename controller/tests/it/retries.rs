use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common;
use crate::double::{Answer, ModelDouble, ev_message, ev_response};

fn responses_command(double: &ModelDouble, workspace: &std::path::Path) -> std::process::Command {
    double.openai_command(&[
        "run",
        "--policy",
        "allow-all",
        "--model",
        "openai/gpt-5-mini",
        workspace.to_str().unwrap(),
        "hello",
    ])
}

#[tokio::test(flavor = "multi_thread")]
async fn rate_limits_and_unavailability_are_retried_honouring_retry_after() {
    let double = ModelDouble::start().await;
    let error = |message: &str| json!({"error": {"message": message, "type": "server_error"}});
    double.push(Answer::Status {
        status: 429,
        retry_after: Some("1".into()),
        body: error("Rate limit reached"),
    });
    double.push(Answer::Status {
        status: 503,
        retry_after: Some("1".into()),
        body: error("Overloaded"),
    });
    double.push(Answer::Status {
        status: 500,
        retry_after: None,
        body: error("boom"),
    });
    double.push_json(ev_response(&[ev_message("Hello!")], 10, 0, 5));
    let workspace = tempfile::tempdir().unwrap();
    let run = common::run(
        responses_command(&double, workspace.path()),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "Hello!\n");
    assert_eq!(double.requests().len(), 4);
    assert!(
        run.elapsed >= Duration::from_secs(2),
        "two Retry-After: 1 waits, took {:?}",
        run.elapsed
    );
    assert!(
        run.stderr.contains("Rate limit reached"),
        "each retry is logged: {}",
        run.stderr
    );
    double.assert_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn other_client_errors_surface_at_once_with_the_providers_message() {
    let double = ModelDouble::start().await;
    let body = json!({"error": {"message": "Invalid value for 'reasoning.effort'", "type": "invalid_request_error"}});
    double.push(Answer::Status {
        status: 400,
        retry_after: None,
        body,
    });
    let workspace = tempfile::tempdir().unwrap();
    let run = common::run(
        responses_command(&double, workspace.path()),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr
            .contains("OpenAI Responses API answered 400: Invalid value for 'reasoning.effort'"),
        "{}",
        run.stderr
    );
    assert_eq!(double.requests().len(), 1, "a 400 is not retried");
    double.assert_clean();
}
