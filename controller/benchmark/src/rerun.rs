//! A benchmark session re-run where it ran: the task's own containers, built again from the
//! task's folder, the initial workspace put back, and the oracle's solution uploaded again, so
//! `replay rerun` compares like with like. A log is someone else's: the folder it names must
//! hold the very files the session ran (their digest), and the image it names is used only
//! under `--trust-log`.

use std::path::Path;

use crate::error::{Doing, Failed, failed, failure};

use super::container::{StartSpec, TaskEnvironment, static_server};
use super::image::BuildSettings;
use harness_log::{Event, SessionStarted};
use harness_replay;
use harness_runtime::step::describe;

/// The header of a session log.
pub fn header(dir: &Path) -> Failed<SessionStarted> {
    let unreadable = |err: harness_replay::ReplayError| failure!("{err}");
    for envelope in harness_replay::events(dir, |_| {}).map_err(unreadable)? {
        if let Event::SessionStarted(header) = envelope.map_err(unreadable)?.event {
            return Ok(*header);
        }
    }
    failed!("{}: the log has no session_started", dir.display())
}

/// Starts the task's containers for a rerun of the benchmark session `header` describes;
/// `note` gets progress lines.
pub async fn start(
    header: &SessionStarted,
    settings: &BuildSettings,
    trust_log: bool,
    note: &(dyn Fn(&str) + Sync),
) -> Failed<TaskEnvironment> {
    let bench = header
        .config
        .benchmark
        .as_ref()
        .ok_or_else(|| failure!("not a benchmark session"))?;
    let dir = Path::new(&bench.dir);
    let mut task = super::load(dir, &bench.name, &super::HostVars::none())
        .doing_with(|| format!("loading the task the session ran ({})", bench.dir))?;
    // The agent ran online or not as the log says (`--network` may have overridden the task).
    let public = task.network.agent == super::NetworkPolicy::Public;
    if bench.online != public {
        task.network.agent = if bench.online {
            super::NetworkPolicy::Public
        } else {
            super::NetworkPolicy::NoNetwork
        };
    }
    if task.digest != bench.digest {
        if !trust_log {
            failed!(
                "{}: the task's files are not those the session ran ({} now, {} in the log); a log is untrusted input: rerun with the task folder as it was, or --trust-log to run these files",
                bench.dir,
                task.digest,
                bench.digest
            );
        }
        note(&format!(
            "warning: the task's files changed since the session ran ({} now, {} then)",
            task.digest, bench.digest
        ));
    }
    note(&format!("task: {} ({})", bench.dir, task.digest));
    let docker = harness_runtime::sandbox::docker::connect().await?;
    // The log's image could be any image of the engine: only under --trust-log.
    let recorded =
        (trust_log && !bench.image.is_empty() && docker.inspect_image(&bench.image).await.is_ok())
            .then_some(bench.image.as_str());
    if trust_log && recorded.is_none() && !bench.image.is_empty() {
        note(&format!(
            "the recorded image {} is gone: building the task's again",
            bench.image
        ));
    }
    let server = static_server()?;
    let token = format!("{:032x}", rand::random::<u128>());
    let session_id = format!("rerun-{}", header.session_id);
    let spec = StartSpec {
        task: &task,
        session_id: &session_id,
        token: &token,
        server_binary: &server,
        settings,
        internet: "bridge",
        tools: None,
        main_image: recorded,
        note,
    };
    let environment = TaskEnvironment::start(&spec)
        .await
        .map_err(|err| failure!("starting the task's containers: {}", describe(&err)))?;
    // The agent's network, as the session had it.
    environment.set_network(&task.network.agent).await?;
    if header.config.agent.as_deref() == Some("oracle")
        && let Some(solution) = &task.solution
    {
        environment
            .upload(&solution.dir, solution.only.as_deref(), &solution.mount)
            .await?;
    }
    Ok(environment)
}
