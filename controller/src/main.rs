//! `harness`: parse the command line, run, and turn the outcome into an exit code. This binary
//! is the edge that talks to a person: it prints progress to stderr and the answer to stdout.

// Printing is this binary's job.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod policy_cmd;
mod replay_cmd;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use controller::cli::{Cli, Command, RunArgs};
use controller::config::{RunConfig, SandboxTarget};
use controller::event_log::{
    self, CheckResult, ErrorEvent, Event, EventLog, RunSettings, SessionFinished, SessionStarted,
    Text,
};
use controller::exit_code;
use controller::llm::{self, RetryPolicy, ToolCall};
use controller::local_sandbox::LocalSandbox;
use controller::policy::{self, AllowAll, Classifier, Pipeline, Policy};
use controller::recording::Recorder;
use controller::run_loop::{Agent, Observer, Outcome, Totals};
use controller::sandbox_client::SandboxClient;
use controller::{prompt, seed};
use sandbox_protocol::ToolSpec;
use serde_json::json;

fn main() {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: starting the async runtime: {err}");
            std::process::exit(exit_code::ERROR);
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run(*args).await,
            Command::Replay(command) => replay_cmd::run(command).await,
            Command::Policy(command) => policy_cmd::run(command).await,
        }
    });
    std::process::exit(code);
}

/// Prints each tool call as it starts, as the seed.
struct Terminal;

impl Observer for Terminal {
    fn tool_call(&self, call: &ToolCall) {
        eprintln!("  > {}", call.name);
    }

    fn compacted(&self, before: usize, after: usize) {
        eprintln!("  (compacted the history: {before} messages -> {after})");
    }
}

async fn run(args: RunArgs) -> i32 {
    // Registered now, not when first awaited: a Ctrl-C while the sandbox starts must still end
    // in the cleanup below rather than in the default action.
    let mut interrupt =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()) {
            Ok(signal) => signal,
            Err(err) => {
                eprintln!("error: installing the Ctrl-C handler: {err}");
                return exit_code::ERROR;
            }
        };
    let config = match RunConfig::resolve(&args) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("error: {err:#}");
            return exit_code::ERROR;
        }
    };
    let model = match llm::build(&config.model, RetryPolicy::default()) {
        Ok(model) => model,
        Err(err) => {
            eprintln!("error: {err:#}");
            return exit_code::ERROR;
        }
    };
    eprintln!("model: {}", model.describe());

    // Start or reach the sandbox; from here on every path stops a local one.
    let (local, client) = match connect(&config).await {
        Ok(pair) => pair,
        Err(err) => {
            eprintln!("error: {err:#}");
            return exit_code::ERROR;
        }
    };
    let secrets = controller::secrets::values(
        &client
            .token()
            .map(str::to_owned)
            .into_iter()
            .collect::<Vec<_>>(),
    );
    let session_id = event_log::new_session_id();
    let log_dir = args.log_dir.join(&session_id);
    let log = match EventLog::create(&log_dir, args.log_durability, secrets) {
        Ok(log) => log,
        Err(err) => {
            eprintln!("error: {err}");
            if let Some(local) = local {
                local.stop().await;
            }
            return exit_code::ERROR;
        }
    };
    eprintln!("log: {}", log_dir.display());
    let recorder = Recorder::new(log.clone(), client.clone());
    let totals = std::sync::Mutex::new(Totals::default());
    let started = std::time::Instant::now();
    let policy = match build_policy(&args, &config, &model) {
        Ok(policy) => policy,
        Err(err) => {
            eprintln!("error: {err:#}");
            if let Some(local) = local {
                local.stop().await;
            }
            return exit_code::ERROR;
        }
    };
    let parts = Session {
        config: &config,
        args: &args,
        session_id: &session_id,
        model: model.as_ref(),
        client: &client,
        recorder: &recorder,
        policy: policy.as_ref(),
    };
    let (code, outcome, answer) = tokio::select! {
        result = parts.run(&totals) => result,
        _ = interrupt.recv() => {
            eprintln!("\ninterrupted: stopping the sandbox");
            (exit_code::INTERRUPTED, "interrupted", String::new())
        }
    };
    let totals = *totals.lock().unwrap_or_else(|p| p.into_inner());
    let empty = Text {
        text: Some(String::new()),
        blob: None,
        preview: None,
        size: 0,
    };
    let finished = SessionFinished {
        outcome: outcome.to_owned(),
        answer: log.text(&answer).unwrap_or(empty),
        turns: totals.turns,
        model_calls: totals.model_calls,
        tool_calls: totals.tool_calls,
        usage: totals.usage,
        cost: totals.cost,
        cost_known: totals.cost_known,
        duration_ms: started.elapsed().as_millis() as u64,
    };
    if let Err(err) = log
        .record(Event::SessionFinished(finished))
        .await
        .and(log.close().await)
    {
        eprintln!("error: {err}");
    }
    if let Some(local) = local {
        local.stop().await;
    }
    code
}

async fn connect(config: &RunConfig) -> anyhow::Result<(Option<LocalSandbox>, SandboxClient)> {
    match &config.sandbox {
        SandboxTarget::Local => {
            let dir = local_workspace(config)?;
            eprintln!("workspace: {}", dir.display());
            let sandbox = LocalSandbox::start(
                &dir,
                config.tools.as_deref(),
                &config.network,
                &config.writable,
            )
            .await?;
            let client = sandbox.client.clone();
            Ok((Some(sandbox), client))
        }
        SandboxTarget::Remote { url, token_file } => {
            if let Some(dir) = &config.working_dir {
                eprintln!(
                    "note: the working directory {} is ignored with a remote sandbox",
                    dir.display()
                );
            }
            let token = match token_file {
                Some(file) => Some(
                    std::fs::read_to_string(file)
                        .with_context(|| format!("reading the sandbox token {}", file.display()))?
                        .trim()
                        .to_owned(),
                ),
                None => None,
            };
            let client = SandboxClient::new(url, token);
            client
                .wait_healthy(Duration::from_secs(10))
                .await
                .with_context(|| format!("reaching the sandbox at {url}"))?;
            Ok((None, client))
        }
    }
}

/// The folder a local sandbox serves: the working directory (created when missing), or, for a
/// task that brings its own workspace, an empty folder to seed.
fn local_workspace(config: &RunConfig) -> anyhow::Result<PathBuf> {
    match (&config.workspace, &config.working_dir) {
        (None, Some(dir)) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating the working directory {}", dir.display()))?;
            Ok(dir.clone())
        }
        (None, None) => Ok(PathBuf::from(".")),
        (Some(_), Some(dir)) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let empty = std::fs::read_dir(dir)
                .with_context(|| format!("reading {}", dir.display()))?
                .next()
                .is_none();
            if !empty {
                anyhow::bail!(
                    "{} is not empty: a task with a workspace source is copied into an empty folder",
                    dir.display()
                );
            }
            Ok(dir.clone())
        }
        (Some(_), None) => {
            let dir = tempfile::Builder::new()
                .prefix("harness-workspace-")
                .tempdir()
                .context("creating a workspace folder")?;
            Ok(dir.keep())
        }
    }
}

/// The policy of a run: `allow-all`, or rules (a file's and the built-in ones) then the classifier.
fn build_policy(
    args: &RunArgs,
    config: &RunConfig,
    model: &std::sync::Arc<dyn llm::Model>,
) -> anyhow::Result<Box<dyn Policy>> {
    if args.policy.as_deref() == Some("allow-all") {
        eprintln!("policy: allow-all (every tool call runs unchecked)");
        return Ok(Box::new(AllowAll));
    }
    let file = args.policy.as_deref().map(std::path::Path::new);
    let rules = policy::load_rules(file)?;
    let classifier = if args.no_classifier {
        None
    } else {
        let (name, classifier_model) = match &args.classifier_model {
            Some(name) => {
                let spec = llm::ModelSpec {
                    name: name.clone(),
                    ..config.model.clone()
                };
                (name.clone(), llm::build(&spec, RetryPolicy::default())?)
            }
            None => (config.model.name.clone(), model.clone()),
        };
        Some(Classifier {
            model: classifier_model,
            model_name: name,
            timeout: std::time::Duration::from_secs(args.classifier_timeout.max(1)),
        })
    };
    let description = format!(
        "rules ({}{} deny, {} ask, {} allow){}; asks settled by: {}",
        file.map(|f| format!("{} + built-in: ", f.display()))
            .unwrap_or_else(|| "built-in: ".to_owned()),
        rules.deny.len(),
        rules.ask.len(),
        rules.allow.len(),
        classifier
            .as_ref()
            .map(|c| format!(" then classifier {}", c.model_name))
            .unwrap_or_default(),
        match args.approve {
            policy::Approve::Ask => "the person at the terminal (none means no)",
            policy::Approve::Never => "nobody (--approve never: every ask is a no)",
            policy::Approve::Auto => "automatic approval (--approve auto)",
        }
    );
    eprintln!("policy: {description}");
    Ok(Box::new(Pipeline {
        rules,
        classifier,
        description,
    }))
}

/// One session once its sandbox is up.
struct Session<'a> {
    config: &'a RunConfig,
    args: &'a RunArgs,
    session_id: &'a str,
    model: &'a dyn llm::Model,
    client: &'a SandboxClient,
    recorder: &'a Recorder,
    policy: &'a dyn Policy,
}

impl Session<'_> {
    /// Returns the exit code, the outcome for the log and the answer.
    async fn run(&self, totals: &std::sync::Mutex<Totals>) -> (i32, &'static str, String) {
        match self.run_inner(totals).await {
            Ok(result) => result,
            Err(err) => {
                eprintln!("error: {err:#}");
                let event = ErrorEvent {
                    class: "internal".to_owned(),
                    message: format!("{err:#}"),
                    call_id: None,
                };
                let _ = self.recorder.log.record(Event::Error(event)).await;
                (exit_code::ERROR, "error", String::new())
            }
        }
    }

    async fn run_inner(
        &self,
        totals: &std::sync::Mutex<Totals>,
    ) -> anyhow::Result<(i32, &'static str, String)> {
        let (config, client, recorder) = (self.config, self.client, self.recorder);
        let (system, tools, root) = match prepare(config, self.model, client).await {
            Ok(ready) => ready,
            Err(err) => {
                self.header(None, None).await?;
                return Err(err);
            }
        };
        self.header(Some((&system.text, &tools)), Some(&root))
            .await?;
        recorder
            .initial_snapshot()
            .await
            .context("recording the initial workspace")?;
        recorder
            .fingerprint(None)
            .await
            .context("recording the state fingerprint")?;

        let agent = Agent {
            model: self.model,
            sandbox: client,
            policy: self.policy,
            approve: self.args.approve,
            tools,
            limits: config.limits,
            observer: &Terminal,
            recorder,
        };
        let report = match agent.run(&system.text, &config.prompt, totals).await {
            Ok(report) => report,
            Err(err) => {
                // Already an `error` event, with its class.
                eprintln!("error: {err}");
                return Ok((exit_code::ERROR, "error", String::new()));
            }
        };
        recorder
            .fingerprint(None)
            .await
            .context("recording the state fingerprint")?;
        println!("{}", report.answer);
        let spent = report.totals;
        if spent.cost_known {
            eprintln!("cost=${:.4}", spent.cost);
        } else {
            eprintln!(
                "cost=unknown (at least ${:.4}; the model has no known price)",
                spent.cost
            );
        }
        let (mut code, mut outcome) = match report.outcome {
            Outcome::Completed => (exit_code::COMPLETED, "completed"),
            Outcome::TurnLimit => (exit_code::TURN_LIMIT, "turn_limit"),
            Outcome::CostLimit => (exit_code::COST_LIMIT, "cost_limit"),
        };
        if let Some(check) = &config.check {
            let started = std::time::Instant::now();
            let result = bash(client, check, config.check_timeout)
                .await
                .context("running the check")?;
            let passed = result["exit_code"] == 0;
            let output = result["output"].as_str().unwrap_or("");
            eprintln!(
                "check: {} ({check})",
                if passed { "passed" } else { "failed" }
            );
            let event = CheckResult {
                command: check.clone(),
                passed,
                exit_code: result["exit_code"].as_i64().unwrap_or(-1) as i32,
                output: recorder.log.text(output)?,
                duration_ms: started.elapsed().as_millis() as u64,
            };
            recorder.log.record(Event::CheckResult(event)).await?;
            if !passed {
                eprintln!("{output}");
                if code == exit_code::COMPLETED {
                    (code, outcome) = (exit_code::CHECK_FAILED, "check_failed");
                }
            }
        }
        Ok((code, outcome, report.answer))
    }

    /// The header: written first, with whatever of the prompt and tools exist by then.
    async fn header(
        &self,
        prompt: Option<(&str, &[ToolSpec])>,
        workspace_root: Option<&str>,
    ) -> anyhow::Result<()> {
        let (config, log) = (self.config, &self.recorder.log);
        let (system_prompt, tools) = match prompt {
            Some((text, tools)) => (
                Some(log.text(text)?),
                Some(log.json_blob(&serde_json::to_value(tools)?)?),
            ),
            None => (None, None),
        };
        let settings = RunSettings {
            model: config.model.name.clone(),
            model_description: self.model.describe(),
            reasoning_effort: config.model.reasoning_effort.clone(),
            web_search: config.model.web_search,
            max_turns: config.limits.max_turns,
            max_cost: config.limits.max_cost,
            compact_at: config.limits.compact_at as u64,
            tool_names: prompt
                .map(|(_, tools)| tools.iter().map(|t| t.name.clone()).collect())
                .unwrap_or_default(),
            policy: self.policy.name(),
            sandbox: match config.sandbox {
                SandboxTarget::Local => "local".to_owned(),
                SandboxTarget::Remote { .. } => "remote".to_owned(),
            },
            sandbox_url: self.client.url().to_owned(),
            workspace_root: workspace_root.map(str::to_owned),
            working_dir: config
                .working_dir
                .as_ref()
                .map(|dir| dir.display().to_string()),
            setup: config.setup.clone(),
            check: config.check.clone(),
            log_durability: self.args.log_durability.name().to_owned(),
        };
        let started = SessionStarted {
            format_version: event_log::FORMAT_VERSION,
            session_id: self.session_id.to_owned(),
            harness_version: env!("CARGO_PKG_VERSION").to_owned(),
            task: config.prompt.clone(),
            config: settings,
            system_prompt,
            tools,
        };
        log.record(Event::SessionStarted(Box::new(started))).await?;
        Ok(())
    }
}

/// Seeds the workspace, runs setup, and builds the system prompt and tool list.
async fn prepare(
    config: &RunConfig,
    model: &dyn llm::Model,
    client: &SandboxClient,
) -> anyhow::Result<(prompt::SystemPrompt, Vec<ToolSpec>, String)> {
    if let Some(source) = &config.workspace {
        let seeded = seed::seed(client, source)
            .await
            .context("seeding the workspace")?;
        eprintln!(
            "seeded the workspace: {} files, {} bytes",
            seeded.n_files, seeded.n_bytes
        );
        for skipped in &seeded.skipped {
            eprintln!("  skipped {skipped}");
        }
    }
    for command in &config.setup {
        eprintln!("setup: {command}");
        let result = bash(client, command, config.check_timeout)
            .await
            .context("running a setup command")?;
        if result["exit_code"] != 0 {
            eprintln!("{}", result["output"].as_str().unwrap_or(""));
            anyhow::bail!("setup command failed: {command}");
        }
    }
    let info = client
        .info()
        .await
        .context("asking the sandbox for its info")?;
    let offered = client
        .tools()
        .await
        .context("listing the sandbox's tools")?;
    let tools = match &config.tools {
        None => offered,
        Some(wanted) => {
            if let Some(missing) = wanted
                .iter()
                .find(|name| !offered.iter().any(|tool| &tool.name == *name))
            {
                let names: Vec<&str> = offered.iter().map(|tool| tool.name.as_str()).collect();
                anyhow::bail!(
                    "tool `{missing}` is not offered by the sandbox (it has: {})",
                    names.join(", ")
                );
            }
            offered
                .into_iter()
                .filter(|tool| wanted.contains(&tool.name))
                .collect()
        }
    };
    let system = prompt::build(client, &info.workspace_root)
        .await
        .context("reading AGENTS.md and skills")?;
    for warning in &system.warnings {
        eprintln!("warning: {warning}");
    }
    if !model.has_price() {
        eprintln!(
            "warning: no price is known for this model, so its cost is unknown and --max-cost ({:.2}) cannot stop the run; give one with --price INPUT,OUTPUT",
            config.limits.max_cost
        );
    }
    Ok((system, tools, info.workspace_root))
}

async fn bash(
    client: &SandboxClient,
    cmd: &str,
    timeout: u32,
) -> anyhow::Result<serde_json::Value> {
    Ok(client
        .call_tool(
            "bash",
            &json!({"cmd": cmd, "timeout": timeout.clamp(1, 3600)}),
        )
        .await?)
}
