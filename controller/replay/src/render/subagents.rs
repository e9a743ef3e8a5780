//! The transcript blocks of subagents: a child started on an `agent` call, how it ended (and
//! a forked child's changes), and in a child's header, whose call it answers.

use std::path::Path;

use super::{Block, folded, plain};
use crate::ReplayError;
use harness_log::{SubagentFinished, SubagentOf, SubagentStarted};

pub(super) fn started(
    block: &mut Block,
    dir: &Path,
    started: &SubagentStarted,
) -> Result<(), ReplayError> {
    block.title = format!(
        "Subagent started for call {} (depth {}, {} workspace)",
        started.call_id,
        started.depth,
        started.workspace.as_str()
    );
    block.notes.push(format!(
        "its log: {} (harness replay show {})",
        started.log_dir,
        dir.join(&started.log_dir).display()
    ));
    block.sections.push(folded(dir, "sub-task", &started.task)?);
    Ok(())
}

pub(super) fn finished(block: &mut Block, finished: &SubagentFinished) {
    block.title = match finished.failure {
        Some(failure) => format!(
            "Subagent of call {} finished: {} ({})",
            finished.call_id,
            finished.outcome.as_str(),
            failure.as_str()
        ),
        None => format!(
            "Subagent of call {} finished: {}",
            finished.call_id,
            finished.outcome.as_str()
        ),
    };
    block.notes.push(format!(
        "{} turns, {} model calls, {} tool calls, ${:.4}{}, {:.1} s; log {}",
        finished.turns,
        finished.model_calls,
        finished.tool_calls,
        finished.cost,
        if finished.cost_known {
            ""
        } else {
            " (some cost unknown)"
        },
        finished.duration_ms as f64 / 1000.0,
        finished.log_dir
    ));
    if let Some(theirs) = &finished.subagents {
        block.notes.push(format!(
            "its own subagents: {} sessions, ${:.4}",
            theirs.count, theirs.cost
        ));
    }
    if let Some(merge) = &finished.merge {
        let verdict = match (merge.applied, merge.changes.is_empty()) {
            (_, true) => "no changes".to_owned(),
            (true, false) => format!("{} changes applied", merge.changes.len()),
            (false, false) => format!(
                "{} changes not applied (clashing: {})",
                merge.changes.len(),
                merge.conflicts.join(", ")
            ),
        };
        block.notes.push(format!("forked workspace: {verdict}"));
        let list: Vec<String> = merge
            .changes
            .iter()
            .map(|c| format!("{} {}", c.change.as_str(), c.path))
            .collect();
        if !list.is_empty() {
            block.sections.push(plain("its changes", &list.join("\n")));
        }
    }
}

/// The header's note for a subagent's own log.
pub(super) fn of(parent: &SubagentOf) -> String {
    format!(
        "subagent of session {} ({}), for its call {}, at depth {}, {} workspace",
        parent.session_id,
        parent.log_dir,
        parent.call_id,
        parent.depth,
        parent.workspace.as_str()
    )
}
