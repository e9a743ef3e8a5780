//! `harness sandboxes prune`: remove the containers a killed harness left.

use runtime::exit_code;
use runtime::sandbox::docker;

use super::SandboxesCommand;

pub(crate) async fn run(command: SandboxesCommand) -> anyhow::Result<i32> {
    let SandboxesCommand::Prune { all } = command;
    let (removed, kept) = docker::prune(all).await?;
    for container in &removed {
        println!(
            "removed {} (session {}): {}",
            container.id, container.session, container.reason
        );
    }
    for container in &kept {
        eprintln!(
            "kept {} (session {}): {}",
            container.id, container.session, container.reason
        );
    }
    eprintln!("{} removed, {} kept", removed.len(), kept.len());
    Ok(exit_code::COMPLETED)
}
