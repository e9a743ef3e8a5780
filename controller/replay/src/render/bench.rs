//! The transcript blocks of a benchmark task's events: its images, its steps' score, the
//! isolation between agent and verifier, the verifier.

use std::path::Path;

use super::{Block, folded};
use crate::ReplayError;
use harness_log::{ImageBuilt, StepsFinished, VerifierFinished, VerifierIsolated};

pub(super) fn image_built(
    block: &mut Block,
    dir: &Path,
    image: &ImageBuilt,
) -> Result<(), ReplayError> {
    block.title = format!(
        "Image {} for {}: {} ({:.1} s)",
        image.tag,
        image.service,
        if image.cached { "cached" } else { "built" },
        image.duration_ms as f64 / 1000.0
    );
    if let Some(output) = &image.output {
        block.sections.push(folded(dir, "build output", output)?);
    }
    Ok(())
}

pub(super) fn steps_finished(block: &mut Block, steps: &StepsFinished) {
    block.title = match steps.reward {
        Some(reward) => format!(
            "Steps scored ({}): reward {reward} ({} at threshold {})",
            steps.strategy,
            if steps.passed { "pass" } else { "fail" },
            steps.pass_threshold
        ),
        None => format!("Steps scored ({}): no step gave a reward", steps.strategy),
    };
    for step in &steps.steps {
        let verdict = match (&step.error, step.reward) {
            (Some(error), Some(reward)) => format!("reward {reward}, {error}"),
            (Some(error), None) => error.clone(),
            (None, Some(reward)) => format!("reward {reward}"),
            (None, None) => "no reward".to_owned(),
        };
        block.notes.push(format!("{}: {verdict}", step.name));
    }
    if let Some(why) = &steps.stopped {
        block.notes.push(format!("stopped: {why}"));
    }
}

pub(super) fn verifier_isolated(block: &mut Block, isolated: &VerifierIsolated) {
    let step = isolated
        .step
        .as_ref()
        .map_or_else(String::new, |s| format!(" (step {s})"));
    block.title = format!(
        "Verifier isolated{step}: {} processes ended, {}",
        isolated.processes_ended.len(),
        if isolated.tampered {
            "TAMPERING by the agent"
        } else {
            "no tampering"
        }
    );
    for process in &isolated.processes_ended {
        block
            .notes
            .push(format!("ended pid {}: {}", process.pid, process.command));
    }
    for change in &isolated.changes {
        block
            .notes
            .push(format!("{:?}: {}", change.change, change.path).to_lowercase());
    }
    for call in &isolated.calls {
        block.notes.push(format!(
            "call {} ({}) {} {}",
            call.call_id,
            call.tool,
            if call.write { "wrote" } else { "named" },
            call.path
        ));
    }
    for record in &isolated.egress {
        block.notes.push(format!(
            "egress {} {} ({}×)",
            if record.allowed { "allowed" } else { "REFUSED" },
            record.host,
            record.count
        ));
    }
    if !isolated.restored {
        block
            .notes
            .push("the guarded paths could not be put back: the verifier did not run".to_owned());
    }
    block.notes.extend(isolated.unguarded.iter().cloned());
}

pub(super) fn verifier_finished(
    block: &mut Block,
    dir: &Path,
    verifier: &VerifierFinished,
) -> Result<(), ReplayError> {
    let verdict = match (verifier.reward, verifier.failure) {
        (_, Some(failure)) => format!("failed ({})", failed(failure)),
        (Some(reward), None) => format!(
            "reward {reward} ({} at threshold {})",
            if verifier.passed { "pass" } else { "fail" },
            verifier.pass_threshold
        ),
        (None, None) => "no reward".to_owned(),
    };
    block.title = format!(
        "Verifier: {verdict} (exit {}, {:.1} s)",
        verifier
            .exit_code
            .map_or_else(|| "none".to_owned(), |c| c.to_string()),
        verifier.duration_ms as f64 / 1000.0
    );
    if let Some(step) = &verifier.step {
        block.notes.push(format!("step {step}"));
    }
    if let Some(message) = &verifier.message {
        block.notes.push(message.clone());
    }
    if let Some(note) = &verifier.note {
        block.notes.push(note.clone());
    }
    if let Some(rewards) = verifier.rewards.as_ref().filter(|r| r.len() > 1) {
        let named: Vec<String> = rewards.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        block.notes.push(format!("rewards: {}", named.join(", ")));
    }
    block
        .sections
        .push(folded(dir, "test output", &verifier.output)?);
    Ok(())
}

/// How a verifier failed, for a reader.
fn failed(failure: harness_log::VerifierFailure) -> &'static str {
    use harness_log::VerifierFailure;
    match failure {
        VerifierFailure::Timeout => "it timed out",
        VerifierFailure::NoReward => "it wrote no reward file",
        VerifierFailure::EmptyReward => "its reward file is empty",
        VerifierFailure::BadReward => "its reward file holds no number",
        VerifierFailure::ParseError => "its output held nothing to judge",
        VerifierFailure::Tampered => "the agent's changes to its folders resisted their reset",
    }
}
