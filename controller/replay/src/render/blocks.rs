//! One transcript block per event: its title, notes and sections.

mod batch;
mod workspace;

use std::path::Path;

use super::{Block, Section, bench, blob_path, folded, plain};
use crate::{ReplayError, text};
use batch::{
    batch_finished, batch_started, task_finished, task_retried, task_skipped, task_started,
};
use harness_log::{
    CheckResult, Compaction, ErrorEvent, Event, ModelRequest, ModelResponse, PolicyDecision,
    Purpose, SessionFinished, SessionStarted, ToolCallEvent, ToolResult,
};
use workspace::{state_fingerprint, workspace_changed, workspace_snapshot};

pub(super) fn block(
    dir: &Path,
    seq: u64,
    ts: String,
    event: &Event,
) -> Result<Option<Block>, ReplayError> {
    let mut block = Block {
        seq,
        ts,
        kind: event.kind(),
        title: String::new(),
        sections: Vec::new(),
        notes: Vec::new(),
    };
    match event {
        Event::BatchStarted(batch) => batch_started(&mut block, dir, batch)?,
        Event::TaskStarted(task) => task_started(&mut block, dir, task)?,
        Event::TaskFinished(task) => task_finished(&mut block, dir, task)?,
        Event::TaskRetried(task) => task_retried(&mut block, dir, task)?,
        Event::TaskSkipped(task) => task_skipped(&mut block, dir, task)?,
        Event::TaskNotRunnable(task) => {
            block.title = format!("Task {} is not runnable", task.task);
            block.notes.push(format!("{}: {}", task.file, task.reason));
            if let Some(why) = &task.expected {
                block.notes.push(format!("expected: {why}"));
            }
        }
        Event::BatchFinished(batch) => batch_finished(&mut block, dir, batch)?,
        Event::SessionStarted(header) => session_started(&mut block, dir, header)?,
        Event::WorkspaceSnapshot(snapshot) => workspace_snapshot(&mut block, dir, snapshot)?,
        Event::ModelRequest(request) => model_request(&mut block, dir, request)?,
        Event::ModelResponse(response) => model_response(&mut block, dir, response)?,
        Event::ToolCall(call) => tool_call(&mut block, dir, call)?,
        Event::PolicyDecision(decision) => policy_decision(&mut block, dir, decision)?,
        Event::HookRun(run) => super::hooks::hook_run(&mut block, dir, run)?,
        Event::ToolResult(result) => tool_result(&mut block, dir, result)?,
        Event::WorkspaceChanged(changed) => workspace_changed(&mut block, dir, changed)?,
        Event::StateFingerprint(fingerprint) => state_fingerprint(&mut block, dir, fingerprint)?,
        Event::Compaction(compaction) => compacted(&mut block, dir, compaction)?,
        Event::Error(error) => error_event(&mut block, dir, error)?,
        Event::CheckResult(check) => check_result(&mut block, dir, check)?,
        Event::ImageBuilt(image) => bench::image_built(&mut block, dir, image)?,
        Event::StepStarted(step) => {
            block.title = format!("Step {}: {}", step.index, step.name);
            block
                .sections
                .push(folded(dir, "instruction", &step.instruction)?);
        }
        Event::StepsFinished(steps) => bench::steps_finished(&mut block, steps),
        Event::VerifierIsolated(isolated) => bench::verifier_isolated(&mut block, isolated),
        Event::VerifierFinished(verifier) => bench::verifier_finished(&mut block, dir, verifier)?,
        Event::SubagentStarted(started) => super::subagents::started(&mut block, dir, started)?,
        Event::SubagentFinished(finished) => super::subagents::finished(&mut block, finished),
        Event::SessionFinished(finished) => session_finished(&mut block, dir, finished)?,
    }
    Ok(Some(block))
}

fn session_started(
    block: &mut Block,
    dir: &Path,
    header: &SessionStarted,
) -> Result<(), ReplayError> {
    let config = &header.config;
    block.title = "Session started".to_owned();
    block
        .notes
        .push(format!("model: {}", config.model_description));
    block.notes.push(format!(
        "limits: {} turns, ${:.2}, compact at {} tokens; tools: {}; policy: {}; sandbox: {} ({})",
        config.max_turns,
        config.max_cost,
        config.compact_at,
        config.tool_names.join(", "),
        config.policy,
        config.sandbox.as_str(),
        config.sandbox_url
    ));
    if let Some(parent) = &header.forked_from {
        block.notes.push(format!(
            "forked from session {} ({}) after its step {} (turn {}, {} messages): child {} of fork {}",
            parent.session_id,
            parent.log_dir,
            parent.seq,
            parent.turns,
            parent.n_messages,
            parent.child,
            parent.fork_id
        ));
    }
    if let Some(parent) = &header.subagent_of {
        block.notes.push(super::subagents::of(parent));
    }
    block.sections.push(plain("task", &header.task));
    if let Some(prompt) = &header.system_prompt {
        block.sections.push(folded(dir, "system prompt", prompt)?);
    }
    Ok(())
}

fn model_request(
    block: &mut Block,
    _dir: &Path,
    request: &ModelRequest,
) -> Result<(), ReplayError> {
    let what = match request.purpose {
        Purpose::Turn => format!("Model request, turn {}", request.turn),
        Purpose::Summary => format!(
            "Model request for a compaction summary, turn {}",
            request.turn
        ),
    };
    block.title = format!(
        "{what}: {} messages, ~{} tokens",
        request.n_messages, request.estimated_tokens
    );
    Ok(())
}

fn model_response(
    block: &mut Block,
    dir: &Path,
    response: &ModelResponse,
) -> Result<(), ReplayError> {
    let cost = response
        .cost
        .map(|c| format!("${c:.4}"))
        .unwrap_or_else(|| "cost unknown".to_owned());
    block.title = format!(
        "Model (turn {}{})",
        response.turn,
        if response.purpose == Purpose::Summary {
            ", summary"
        } else {
            ""
        }
    );
    block.notes.push(format!(
        "{} in ({} cached) / {} out tokens, {cost}, {} ms",
        response.usage.input_tokens + response.usage.cached_input_tokens,
        response.usage.cached_input_tokens,
        response.usage.output_tokens,
        response.latency_ms
    ));
    let said = text(dir, &response.text)?;
    if !said.is_empty() {
        block.sections.push(plain("said", &said));
    }
    for call in &response.tool_calls {
        block
            .notes
            .push(format!("asks for `{}` ({})", call.name, call.id));
    }
    Ok(())
}

fn tool_call(block: &mut Block, _dir: &Path, call: &ToolCallEvent) -> Result<(), ReplayError> {
    block.title = format!("Tool call `{}` ({})", call.name, call.call_id);
    let pretty = serde_json::from_str::<serde_json::Value>(&call.arguments)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| call.arguments.clone());
    block.sections.push(Section {
        label: "arguments".to_owned(),
        body: pretty,
        lang: "json",
        full: None,
    });
    Ok(())
}

fn policy_decision(
    block: &mut Block,
    _dir: &Path,
    decision: &PolicyDecision,
) -> Result<(), ReplayError> {
    block.title = format!(
        "Policy: {} `{}` ({})",
        if decision.allowed {
            "allowed"
        } else {
            "refused"
        },
        decision.tool,
        decision.source.as_str()
    );
    if !decision.reason.is_empty() {
        block.notes.push(format!(
            "{}: {}",
            decision.decision.as_str(),
            decision.reason
        ));
    }
    Ok(())
}

fn tool_result(block: &mut Block, dir: &Path, result: &ToolResult) -> Result<(), ReplayError> {
    let exit = result
        .exit_code
        .map(|code| format!(", exit {code}"))
        .unwrap_or_default();
    let timed_out = if result.timed_out == Some(true) {
        ", timed out"
    } else {
        ""
    };
    block.title = format!(
        "Result of `{}`: {}{exit}{timed_out}, {} ms",
        result.name,
        result.status.as_str(),
        result.duration_ms
    );
    block
        .sections
        .push(folded(dir, "the model saw", &result.output)?);
    for output in &result.outputs {
        if let Some(reference) = &output.blob {
            block.notes.push(format!(
                "full {}: {} bytes, {}",
                output.stream.as_str(),
                output.total_bytes,
                blob_path(dir, reference).display()
            ));
        }
    }
    Ok(())
}

fn compacted(block: &mut Block, dir: &Path, compaction: &Compaction) -> Result<(), ReplayError> {
    block.title = format!(
        "Compaction: {} messages replaced ({} -> {})",
        compaction.n_replaced, compaction.n_before, compaction.n_after
    );
    block
        .sections
        .push(folded(dir, "summary", &compaction.summary)?);
    Ok(())
}

fn error_event(block: &mut Block, _dir: &Path, error: &ErrorEvent) -> Result<(), ReplayError> {
    block.title = format!("Error ({})", error.class.as_str());
    block.sections.push(plain("message", &error.message));
    Ok(())
}

fn check_result(block: &mut Block, dir: &Path, check: &CheckResult) -> Result<(), ReplayError> {
    block.title = format!(
        "Check {}: `{}` (exit {})",
        if check.passed { "passed" } else { "failed" },
        check.command,
        check.exit_code
    );
    block.sections.push(folded(dir, "output", &check.output)?);
    Ok(())
}

fn session_finished(
    block: &mut Block,
    dir: &Path,
    finished: &SessionFinished,
) -> Result<(), ReplayError> {
    let cost = if finished.cost_known {
        format!("${:.4}", finished.cost)
    } else if finished.cost > 0.0 {
        format!(
            "at least ${:.4} (some usage has no known price)",
            finished.cost
        )
    } else {
        "unknown (the model has no known price)".to_owned()
    };
    block.title = match &finished.failure {
        Some(failure) => format!(
            "Session finished: {} ({})",
            finished.outcome.as_str(),
            failure.as_str()
        ),
        None => format!("Session finished: {}", finished.outcome.as_str()),
    };
    block.notes.push(format!(
        "{} turns, {} model calls, {} tool calls, {} in / {} out tokens, {cost}, {:.1} s",
        finished.turns,
        finished.model_calls,
        finished.tool_calls,
        finished.usage.input_tokens + finished.usage.cached_input_tokens,
        finished.usage.output_tokens,
        finished.duration_ms as f64 / 1000.0
    ));
    if let Some(theirs) = &finished.subagents {
        block.notes.push(format!(
            "its subagents: {} sessions, {} turns, {} tool calls, ${:.4}{} (not in the figures above)",
            theirs.count,
            theirs.turns,
            theirs.tool_calls,
            theirs.cost,
            if theirs.cost_known { "" } else { ", some cost unknown" }
        ));
    }
    let answer = text(dir, &finished.answer)?;
    if !answer.is_empty() {
        block.sections.push(plain("answer", &answer));
    }
    Ok(())
}
