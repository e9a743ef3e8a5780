use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use crate::common;
use crate::double::{
    ModelDouble, ev_anthropic, ev_chat, ev_function_call, ev_message, ev_reasoning, ev_response,
};

/// The system prompt the seed builds for `common::workspace()` at `root`.
pub fn expected_system_prompt(root: &std::path::Path) -> String {
    format!(
        "You are a coding agent. Use the tools to complete the user's task in the current directory, then reply with a short summary of what you did.

<project_instructions path=\"{}/AGENTS.md\">
# Rules

Be brief & careful.
</project_instructions>

The following skills provide specialized instructions for specific tasks.
Use the read_file tool to load a skill's SKILL.md when the task matches its description.
Resolve relative paths in a skill against the skill's folder.

<available_skills>
  <skill>
    <name>data-tools</name>
    <description>Summarise &lt;CSV&gt; files &amp; tables.</description>
    <location>.agents/skills/data-tools/SKILL.md</location>
  </skill>
</available_skills>",
        root.canonicalize().unwrap().display()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_responses_sends_output_items_back_verbatim() {
    let double = ModelDouble::start().await;
    let call = ev_function_call("call_1", "bash", r#"{"cmd": "echo hi"}"#);
    double.push_json(ev_response(
        &[ev_reasoning("rs_1"), call.clone()],
        1000,
        200,
        100,
    ));
    double.push_json(ev_response(&[ev_message("All done.")], 2000, 1000, 50));
    let workspace = common::workspace();
    let command = double.openai_command(&[
        "run",
        "--policy",
        "allow-all",
        "--model",
        "openai/gpt-5",
        workspace.path().to_str().unwrap(),
        "Say",
        "hi",
    ]);
    let run = common::run(command, Duration::from_secs(60)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "All done.\n");
    assert!(run.stderr.contains("  > bash\n"), "{}", run.stderr);
    // gpt-5: $1.25 / $10 per M, cached input $0.125: (800×1.25 + 200×0.125 + 100×10 + 1000×1.25 + 1000×0.125 + 50×10) / 1e6
    assert!(run.stderr.contains("cost=$0.0039\n"), "{}", run.stderr);
    double.assert_clean();

    let requests = double.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].path, "/v1/responses");
    assert_eq!(requests[0].headers["authorization"], "Bearer sk-test");
    let first = &requests[0].body;
    assert_eq!(first["model"], "gpt-5");
    assert_eq!(first["reasoning"], json!({"effort": "low"}));
    assert_eq!(
        first["input"][0],
        json!({"role": "system", "content": expected_system_prompt(workspace.path())})
    );
    assert_eq!(
        first["input"][1],
        json!({"role": "user", "content": "Say hi"})
    );
    let names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bash", "read_file", "write_file", "search_replace"]);
    assert!(
        first["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["strict"] == false && t["type"] == "function")
    );

    let second = &requests[1].body["input"];
    assert_eq!(
        second[2],
        ev_reasoning("rs_1"),
        "reasoning item sent back as received"
    );
    assert_eq!(second[3], call, "function call sent back as received");
    assert_eq!(
        second[4],
        json!({"type": "function_call_output", "call_id": "call_1", "output": "exit=0\nstdout:\n  hi"})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_web_search_and_a_response_that_is_not_completed() {
    let double = ModelDouble::start().await;
    let mut incomplete = ev_response(&[ev_message("partial")], 10, 0, 10);
    incomplete["status"] = json!("incomplete");
    incomplete["incomplete_details"] = json!({"reason": "max_output_tokens"});
    double.push_json(incomplete);
    let workspace = tempfile::tempdir().unwrap();
    let command = double.openai_command(&[
        "run",
        "--policy",
        "allow-all",
        "--web-search",
        "--model",
        "openai/gpt-5",
        workspace.path().to_str().unwrap(),
        "task",
    ]);
    let run = common::run(command, Duration::from_secs(60)).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("model response was incomplete max_output_tokens"),
        "{}",
        run.stderr
    );
    let tools = &double.requests()[0].body["tools"];
    assert_eq!(
        tools.as_array().unwrap().last().unwrap(),
        &json!({"type": "web_search"})
    );
    double.assert_clean();
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_completions_uses_tool_calls_and_tool_messages() {
    let double = ModelDouble::start().await;
    double.push_json(ev_chat(
        None,
        &[("c1", "write_file", r#"{"path": "a.txt", "content": "x"}"#)],
        100,
        10,
    ));
    double.push_json(ev_chat(Some("Wrote a.txt."), &[], 150, 5));
    let workspace = common::workspace();
    let command = double.harness_run(
        "local-model",
        &[
            "--policy",
            "allow-all",
            workspace.path().to_str().unwrap(),
            "Write",
            "a.txt",
        ],
    );
    let run = common::run(command, Duration::from_secs(60)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "Wrote a.txt.\n");
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("a.txt")).unwrap(),
        "x"
    );
    // No price for a local model: the cost is unknown, and the run says --max-cost cannot stop it.
    common::assert_contains(
        &run.stderr,
        &["cost=unknown", "--max-cost (1.00) cannot stop the run"],
    );
    double.assert_clean();

    let requests = double.requests();
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert!(
        requests[0].headers.get("authorization").is_none(),
        "no key, no header"
    );
    let messages = &requests[1].body["messages"];
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(
        messages[0]["content"],
        expected_system_prompt(workspace.path())
    );
    assert_eq!(
        messages[2],
        json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": r#"{"path": "a.txt", "content": "x"}"#}}
        ]})
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "c1", "content": "wrote 1 bytes"})
    );
    assert_eq!(requests[0].body["tools"][0]["function"]["name"], "bash");
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_sends_thinking_blocks_back_exactly() {
    let double = ModelDouble::start().await;
    let thinking =
        json!({"type": "thinking", "thinking": "Let me list files.", "signature": "sig-abc123"});
    let redacted = json!({"type": "redacted_thinking", "data": "ENCRYPTED"});
    let tool_use = json!({"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "printf 'a\\nb'"}});
    double.push_json(ev_anthropic(
        &[thinking.clone(), redacted.clone(), tool_use.clone()],
        "tool_use",
        500,
        80,
    ));
    double.push_json(ev_anthropic(
        &[json!({"type": "text", "text": "Listed."})],
        "end_turn",
        700,
        20,
    ));
    let workspace = common::workspace();
    let command = double.anthropic_command(&[
        "run",
        "--policy",
        "allow-all",
        "--model",
        "anthropic/claude-sonnet-4-5",
        "--thinking-budget",
        "2048",
        workspace.path().to_str().unwrap(),
        "List",
        "files",
    ]);
    let run = common::run(command, Duration::from_secs(60)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "Listed.\n");
    // claude-sonnet-4-5: $3 / $15 per M: (1200×3 + 100×15) / 1e6
    assert!(run.stderr.contains("cost=$0.0051\n"), "{}", run.stderr);
    double.assert_clean();

    let requests = double.requests();
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].headers["x-api-key"], "ak-test");
    assert_eq!(requests[0].headers["anthropic-version"], "2023-06-01");
    let first = &requests[0].body;
    assert_eq!(first["system"], expected_system_prompt(workspace.path()));
    assert_eq!(
        first["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert_eq!(
        first["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "List files"}]}])
    );
    assert_eq!(
        first["tools"][0]["input_schema"]["required"],
        json!(["cmd"])
    );
    let second: &Value = &requests[1].body["messages"];
    assert_eq!(
        second[1],
        json!({"role": "assistant", "content": [thinking, redacted, tool_use]})
    );
    assert_eq!(
        second[2],
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "exit=0\nstdout:\n  a\n  b"}]})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_key_names_the_variable() {
    for (model, variable) in [
        ("openai/gpt-5", "OPENAI_API_KEY"),
        ("anthropic/claude-haiku-4-5", "ANTHROPIC_API_KEY"),
    ] {
        let workspace = tempfile::tempdir().unwrap();
        let command = common::command(&[
            "run",
            "--policy",
            "allow-all",
            "--model",
            model,
            workspace.path().to_str().unwrap(),
            "task",
        ]);
        let run = common::run(command, Duration::from_secs(30)).await;
        assert_eq!(run.code, 1);
        assert!(
            run.stderr.contains(&format!("{variable} is not set")),
            "{}",
            run.stderr
        );
    }
}

#[test]
fn the_validator_rejects_what_the_vendors_would() {
    use crate::double::{Schema, violations};
    assert!(
        !violations(
            Schema::CreateChatCompletionRequest,
            &json!({"messages": []})
        )
        .is_empty(),
        "model is required"
    );
    assert!(
        !violations(
            Schema::CreateMessageRequest,
            &json!({"model": "m", "messages": []})
        )
        .is_empty(),
        "max_tokens is required"
    );
    let bad_block = json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]});
    assert!(
        !violations(Schema::CreateMessageRequest, &bad_block).is_empty(),
        "tool_result needs tool_use_id"
    );
    let bad_tool = json!({"model": "m", "input": "hi", "tools": [{"type": "function", "name": 5}]});
    assert!(
        !violations(Schema::CreateResponse, &bad_tool).is_empty(),
        "a function tool's name is a string"
    );
    assert_eq!(
        violations(
            Schema::CreateResponse,
            &json!({"model": "m", "input": "hi"})
        ),
        Vec::<String>::new()
    );
}

/// Model APIs are HTTPS: the adapters speak it, trusting the system's CA store (here one CA,
/// through `SSL_CERT_FILE`, as an operator behind an inspecting proxy would).
#[tokio::test(flavor = "multi_thread")]
async fn a_model_api_over_https_is_reached_with_the_systems_roots() {
    let (ca, cert, key) = common::localhost_certificate();
    let double = ModelDouble::start_tls(&cert, &key).await;
    double.push_json(ev_chat(Some("Hello over TLS."), &[], 100, 5));
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca).unwrap();
    let workspace = common::workspace();
    let hello = |double: &ModelDouble, roots: &std::path::Path| {
        let mut command = double.harness_run(
            "local-model",
            &[workspace.path().to_str().unwrap(), "Say hello"],
        );
        command.env("SSL_CERT_FILE", roots);
        command
    };
    let command = hello(&double, &ca_file);
    let run = common::run(command, Duration::from_secs(60)).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "Hello over TLS.\n");
    double.assert_clean();

    // Without that CA the certificate is not trusted, and the run says so.
    let double = ModelDouble::start_tls(&cert, &key).await;
    let mut command = hello(&double, &dir.path().join("none.pem"));
    command.env("RUST_LOG", "warn");
    let run = common::run(command, Duration::from_secs(120)).await;
    assert_ne!(run.code, 0);
    assert!(
        run.stderr.contains("TLS certificate was refused")
            && run.stderr.contains("UnknownIssuer")
            && run.stderr.contains("SSL_CERT_FILE"),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("retrying"),
        "a refused certificate is not retried: {}",
        run.stderr
    );
}
