//! `replay rerun`: a recorded session's calls run again, each judged by the current policy
//! first, in a local sandbox over the recorded initial workspace, the task's own containers,
//! or a running server; the first divergence reported.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use harness_log::reader;
use harness_log::text::terminal_safe;
use harness_replay::{rerun, restore};
use harness_runtime::sandbox::SandboxClient;
use harness_runtime::sandbox::local::LocalSandbox;

use super::token;
use crate::exit_code;

/// A `--sandbox` choice with its token and TLS files.
pub(super) struct SandboxFlags<'a> {
    pub(super) sandbox: Option<&'a str>,
    pub(super) token_file: Option<&'a Path>,
    pub(super) tls: harness_runtime::sandbox::ClientTls,
}

/// What judges the recorded calls before they run again: the built-in rules and `policy`'s,
/// no classifier; none with `--trust-log`.
pub(super) fn rerun_check(
    trust_log: bool,
    policy: Option<&Path>,
    refuse_asks: bool,
) -> anyhow::Result<Option<rerun::Check>> {
    if trust_log {
        return Ok(None);
    }
    let rules = harness_judge::load_rules(policy)?;
    let policy = harness_judge::Pipeline {
        rules,
        classifier: None,
        description: String::new(),
    };
    Ok(Some(rerun::Check::new(Box::new(policy), refuse_asks)))
}

/// `replay rerun`: the recorded initial workspace rebuilt, the calls run again against it in
/// the chosen sandbox, and the report.
pub(super) async fn rerun_cmd(
    run: &Path,
    flags: SandboxFlags<'_>,
    normalize: &[String],
    check: Option<&rerun::Check>,
    build: &harness_benchmark::flags::TrialFlags,
    mcp: Option<&Path>,
) -> anyhow::Result<i32> {
    let mcp = mcp.map(harness_runtime::mcp::McpConfig::load).transpose()?;
    let dir = reader::session_dir(run);
    let header = harness_benchmark::rerun::header(&dir)?;
    let SandboxFlags {
        sandbox,
        token_file,
        tls,
    } = flags;
    let sandbox = match sandbox {
        None if header.config.benchmark.is_some() => Some("task"),
        other => other,
    };
    let normalizer = rerun::Normalizer::new(normalize).context("--normalize")?;
    let recording = rerun::load(&dir)?;
    let (state, _) = restore::state_at(&dir, recording.initial_seq)?;
    let scratch = tempfile::tempdir().context("creating a scratch folder")?;
    let workspace = scratch.path().join("workspace");
    let restored = restore::write_state(&dir, &state, &workspace)?;
    if !restored.problems.is_empty() {
        for problem in &restored.problems {
            eprintln!("mismatch: {}", terminal_safe(problem));
        }
        anyhow::bail!("the recorded initial workspace could not be rebuilt exactly");
    }
    let tools = sandbox_tools(&recording);
    let place = RerunPlace {
        sandbox,
        workspace: &workspace,
        token_file,
        tls: &tls,
        tools: &tools,
        trust_log: check.is_none(),
    };
    let (target, client) = rerun_sandbox(&place, &header, build).await?;
    let servers = match &mcp {
        Some(config) => Some(start_servers(config, scratch.path(), &client).await),
        None => None,
    };
    // Forked subagents' copies: local, like the rerun's own sandbox (another kind has none).
    let forker =
        matches!(target, RerunSandbox::Local(_)).then(|| super::super::rerun_fork::LocalForker {
            tools: tools.clone(),
        });
    let with = rerun::Rerun {
        normalizer: &normalizer,
        check,
        mcp: servers.as_ref(),
        forker: forker.as_ref().map(|f| f as &dyn rerun::Forker),
    };
    let result = rerun::rerun(&recording, &client, with).await;
    if let Some(servers) = servers {
        servers.stop().await;
    }
    target.stop().await;
    let report = result.context("re-running the calls")?;
    Ok(reported(&report))
}

/// The session's own tools (the opt-in ones included) on the sandbox the calls go to; MCP
/// servers' tools are not the sandbox's (their results come from the log).
fn sandbox_tools(recording: &rerun::Recording) -> Vec<String> {
    recording
        .tools
        .iter()
        .map(|t| t.name.clone())
        .filter(|name| !name.starts_with(harness_runtime::mcp::PREFIX))
        .filter(|name| !harness_runtime::subagent::is_agent_tool(name))
        .collect()
}

/// The `--mcp` servers, started for the rerun; what they say on starting is shown.
async fn start_servers(
    config: &harness_runtime::mcp::McpConfig,
    scratch: &Path,
    client: &SandboxClient,
) -> harness_runtime::mcp::McpTools {
    let (servers, _, notes) = harness_runtime::mcp::McpTools::start(config, scratch, client).await;
    for note in notes {
        eprintln!("{}", harness_log::text::terminal_safe(&note));
    }
    servers
}

/// Prints a rerun's report; its exit code.
fn reported(report: &rerun::RerunReport) -> i32 {
    if report.n_from_log > 0 {
        eprintln!(
            "rerun: {} MCP calls taken from the log (--mcp calls them again)",
            report.n_from_log
        );
    }
    eprintln!(
        "rerun: {} calls re-executed, {} refused calls skipped, {} refused by the current policy, {} divergences",
        report.n_calls,
        report.n_skipped,
        report.refused.len(),
        report.divergences.len()
    );
    // What a log says, shown on a terminal: its escape sequences are shown, not run.
    for refused in &report.refused {
        println!("refused by the current policy: {}", terminal_safe(refused));
    }
    if !report.refused.is_empty() {
        return exit_code::DIVERGED;
    }
    match report.divergences.first() {
        None => exit_code::COMPLETED,
        Some(first) => {
            println!("{}", terminal_safe(&rerun::describe(first)));
            exit_code::DIVERGED
        }
    }
}

/// Where a rerun's calls go: a local sandbox over the restored workspace, a benchmark task's
/// own containers, or a running server whose workspace is replaced.
enum RerunSandbox {
    Local(Box<LocalSandbox>),
    Task(Box<harness_benchmark::container::TaskEnvironment>),
    Remote,
}

impl RerunSandbox {
    async fn stop(self) {
        match self {
            RerunSandbox::Local(local) => local.stop().await,
            RerunSandbox::Task(mut environment) => environment.remove().await,
            RerunSandbox::Remote => {}
        }
    }
}

/// Where a rerun's sandbox is, and what it offers.
struct RerunPlace<'a> {
    sandbox: Option<&'a str>,
    workspace: &'a Path,
    token_file: Option<&'a Path>,
    tls: &'a harness_runtime::sandbox::ClientTls,
    /// The recorded session's tools (none recorded: the server's defaults).
    tools: &'a [String],
    /// `--trust-log`: the task folder and image the log names are taken as they are.
    trust_log: bool,
}

async fn rerun_sandbox(
    place: &RerunPlace<'_>,
    header: &harness_log::SessionStarted,
    build: &harness_benchmark::flags::TrialFlags,
) -> anyhow::Result<(RerunSandbox, SandboxClient)> {
    let (workspace, token_file) = (place.workspace, place.token_file);
    match place.sandbox {
        Some("task") => {
            let settings = harness_benchmark::run::build_settings(build)?;
            let note = |line: &str| eprintln!("{}", terminal_safe(line));
            let environment =
                harness_benchmark::rerun::start(header, &settings, place.trust_log, &note).await?;
            let client = environment.client.clone();
            let target = RerunSandbox::Task(Box::new(environment));
            // The image holds the working folder as it was; recorded files are put back.
            if std::fs::read_dir(workspace).is_ok_and(|mut d| d.next().is_some()) {
                seed(&client, workspace).await?;
            }
            Ok((target, client))
        }
        None | Some("local") => {
            let token = format!("{:032x}", rand::random::<u128>());
            let tools = (!place.tools.is_empty()).then_some(place.tools);
            let options = harness_runtime::sandbox::local::LocalOptions {
                tools,
                ..harness_runtime::sandbox::local::LocalOptions::plain()
            };
            let local = LocalSandbox::start(workspace, &token, options).await?;
            let client = local.client.clone();
            Ok((RerunSandbox::Local(Box::new(local)), client))
        }
        Some(url) => {
            let client = SandboxClient::with_tls(url, token(token_file)?, place.tls)?;
            client
                .wait_healthy(Duration::from_secs(10))
                .await
                .with_context(|| format!("reaching {url}"))?;
            seed(&client, workspace).await?;
            Ok((RerunSandbox::Remote, client))
        }
    }
}

/// Puts the restored initial workspace into a sandbox.
async fn seed(client: &SandboxClient, workspace: &Path) -> anyhow::Result<()> {
    let archive = restore::tar_folder(workspace).context("packing the initial workspace")?;
    client
        .put_archive(archive)
        .await
        .context("seeding the sandbox's workspace")
}
