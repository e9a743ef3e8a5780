//! One session once its sandbox is up: its MCP servers, the agent, the grader, and how a stop
//! (Ctrl-C, the lifetime) reaches what is running.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::header::Header;
use super::prepare::{Prepared, prepare};
use super::sandbox::Sandbox;
use super::{Audience, SessionOptions, SessionOutcome, Stop, provider};
use crate::mcp::{McpConfig, McpTools};
use crate::recording::Recorder;
use crate::run_loop::{Agent, Totals};
use crate::step::{Step, StepError};
use harness_log::EventLog;
use harness_models::Model;
use harness_policy::{Approval, Policy};

/// The largest workspace `.mcp.json` read (`--mcp-workspace`).
const MCP_FILE_MAX: usize = 1 << 20;

/// One session once its sandbox is up.
pub(super) struct Session<'a> {
    options: &'a SessionOptions,
    model: &'a Arc<dyn Model>,
    policy: &'a dyn Policy,
    sandbox: &'a Sandbox,
    audience: Audience<'a>,
    recorder: Recorder,
    /// Its subagents' cancellation: Ctrl-C, or this session's lifetime.
    children: CancellationToken,
    /// Why it stopped, set before `children` is cancelled (its subagents say it).
    stop_reason: Arc<std::sync::OnceLock<String>>,
    /// Groups of `agent` calls running now.
    groups: AtomicUsize,
}

impl<'a> Session<'a> {
    /// The session over a started sandbox: its recorder, and its subagents' cancellation
    /// under the session's own.
    pub(super) fn new(
        options: &'a SessionOptions,
        model: &'a Arc<dyn Model>,
        policy: &'a dyn Policy,
        sandbox: &'a Sandbox,
        audience: Audience<'a>,
        log: &EventLog,
        cancel: &CancellationToken,
    ) -> Session<'a> {
        Session {
            options,
            model,
            policy,
            sandbox,
            audience,
            recorder: Recorder::new(log.clone(), sandbox.client.clone(), &options.session_id)
                .on_host_network(matches!(
                    options.config.sandbox,
                    crate::config::SandboxTarget::Local
                ))
                .with_blob_source(
                    options
                        .subagent
                        .as_ref()
                        .map(|child| child.blob_source.clone()),
                )
                .with_provided_blobs(
                    options
                        .resume
                        .as_ref()
                        .map(|resume| std::sync::Arc::clone(&resume.provided_blobs))
                        .unwrap_or_default(),
                ),
            children: cancel.child_token(),
            stop_reason: Arc::default(),
            groups: AtomicUsize::new(0),
        }
    }
}

impl Session<'_> {
    /// The session run until it ends, Ctrl-C or its lifetime stops it. Its own step: a stop
    /// has to reach its subagents, let them record their end, and give the call it cut short
    /// a result, all before the caller writes the session's end.
    pub(super) async fn run_to_end(
        &self,
        totals: &Mutex<Totals>,
        cancel: &CancellationToken,
    ) -> Result<(SessionOutcome, String), Stop> {
        let lifetime = self.options.config.lifetime.unwrap_or(Duration::MAX);
        let mut run = Box::pin(self.run(totals));
        let stopped_by = tokio::select! {
            result = &mut run => Ok(result),
            () = cancel.cancelled() => Err(Stop::cancelled(self.options.subagent.as_ref())),
            () = sleep_for(lifetime) => Err(Stop::lifetime(lifetime)),
        };
        let ended = match stopped_by {
            Ok(result) => result,
            Err(stop) => {
                // Subagents running: they stop too, and each gets its log's end and its call's
                // result before this session's end is written.
                let _ = self.stop_reason.set(stop.message.clone());
                self.children.cancel();
                drain(run.as_mut(), &self.groups).await;
                Err(stop)
            }
        };
        drop(run);
        // A call the stop cut short (Ctrl-C, the lifetime) still gets its result in the log.
        let cut = ended.as_ref().err().and_then(Stop::cut_short_by);
        if let Some(why) = cut
            && let Err(err) = self.recorder.record_interrupted(why).await
        {
            self.audience.observer.note(&format!(
                "the interrupted call's output was not kept: {err}"
            ));
        }
        ended
    }

    /// The session with its MCP servers up for its length (when it has any).
    async fn run(&self, totals: &Mutex<Totals>) -> Result<(SessionOutcome, String), Stop> {
        let prepared = prepare(
            &self.options.config,
            self.model.as_ref(),
            &self.sandbox.client,
            self.audience.observer,
        )
        .await;
        // After the preparation: the workspace's own `.mcp.json` is there only once seeded.
        let (mcp, tools, servers) = match &prepared {
            Ok(_) => self.start_mcp().await,
            Err(_) => (McpTools::default(), Vec::new(), McpConfig::default()),
        };
        let result = self.run_with(&mcp, tools, servers, prepared, totals).await;
        mcp.stop().await;
        result
    }

    /// The session's MCP servers, started (none when it has none), and their list (what a
    /// subagent inherits).
    async fn start_mcp(&self) -> (McpTools, Vec<sandbox_protocol::ToolSpec>, McpConfig) {
        let config = self.mcp_config().await;
        if config.servers.is_empty() {
            return (McpTools::default(), Vec::new(), config);
        }
        let (mcp, tools, notes) =
            McpTools::start(&config, &self.options.log_dir, &self.sandbox.client).await;
        for note in &notes {
            self.audience.observer.note(note);
        }
        (mcp, tools, config)
    }

    /// The MCP servers: the run's, and with `--mcp-workspace` the workspace's `.mcp.json` (a
    /// file that cannot be read or used is a note, and its servers are left out).
    async fn mcp_config(&self) -> McpConfig {
        let mut config = (*self.options.config.mcp).clone();
        if !self.options.config.mcp_workspace {
            return config;
        }
        let note = |text: String| self.audience.observer.note(&format!("mcp: {text}"));
        match self
            .sandbox
            .client
            .get_file(".mcp.json", MCP_FILE_MAX)
            .await
        {
            Ok(Some(head)) if head.truncated() => note(format!(
                "the workspace's .mcp.json is left out: it is {} bytes, over the {MCP_FILE_MAX} this harness reads",
                head.size
            )),
            Ok(Some(head)) => {
                match McpConfig::from_workspace(&String::from_utf8_lossy(&head.bytes)) {
                    Ok(workspace) => {
                        for name in config.merge(workspace) {
                            note(format!(
                                "the workspace's server {name} is left out: --mcp names one so"
                            ));
                        }
                    }
                    Err(err) => note(format!("the workspace's .mcp.json is left out: {err}")),
                }
            }
            Ok(None) => note("the workspace has no .mcp.json".to_owned()),
            Err(err) => note(format!("reading the workspace's .mcp.json: {err}")),
        }
        config
    }

    /// The seed's run: prepare, record where the agent starts, run it, check its work.
    async fn run_with(
        &self,
        mcp: &McpTools,
        mcp_tools: Vec<sandbox_protocol::ToolSpec>,
        servers: McpConfig,
        mut prepared: Result<Prepared, StepError>,
        totals: &Mutex<Totals>,
    ) -> Result<(SessionOutcome, String), Stop> {
        if let Ok(prepared) = &mut prepared {
            prepared.tools.extend(mcp_tools);
        }
        let header = self.header(prepared.as_ref().ok());
        header
            .record(&self.recorder.log)
            .await
            .map_err(|err| Stop::preparing(&err))?;
        let prepared = prepared.map_err(|err| Stop::preparing(&err))?;
        let grader = self.sandbox.grader();
        grader
            .prepare(&self.recorder.log)
            .await
            .map_err(|err| Stop::preparing(&err))?;
        self.record_start()
            .await
            .map_err(|err| Stop::preparing(&err))?;
        let spawner = self.spawner(servers);
        let agent = Agent {
            model: self.model.as_ref(),
            sandbox: &self.sandbox.client,
            policy: self.policy,
            approval: Approval {
                mode: self.options.config.policy.approve,
                asker: self.audience.asker,
            },
            tools: prepared.tools.clone(),
            limits: self.options.config.limits,
            observer: self.audience.observer,
            recorder: &self.recorder,
            hooks: &self.options.config.hooks,
            mcp,
            resume: self.options.resume.as_deref(),
            subagents: spawner.as_ref().map(|s| s as &dyn crate::run_loop::Spawn),
        };
        let grading = provider::Grading {
            agent: &agent,
            system_prompt: &prepared.system.text,
            config: &self.options.config,
            client: &self.sandbox.client,
            recorder: &self.recorder,
            observer: self.audience.observer,
            log_dir: &self.options.log_dir,
            totals,
        };
        grader.run(grading).await
    }

    /// Who starts this session's subagents, when it has the `agent` tool.
    fn spawner(&self, servers: McpConfig) -> Option<crate::subagent::spawn::Spawner<'_>> {
        let limits = self.options.config.subagents?;
        let (tree, depth) = match &self.options.subagent {
            Some(child) => (child.tree.clone(), child.link.depth),
            None => {
                let config = &self.options.config;
                let tree = crate::subagent::tree::Tree::new(
                    limits,
                    config.limits.max_cost,
                    &config.prompt,
                );
                (Arc::new(tree), 0)
            }
        };
        Some(crate::subagent::spawn::Spawner {
            tree,
            depth,
            options: self.options,
            model: self.model,
            audience: self.audience,
            client: &self.sandbox.client,
            log: &self.recorder.log,
            mcp: Arc::new(servers),
            cancel: &self.children,
            stop_reason: Arc::clone(&self.stop_reason),
            groups: &self.groups,
            parallel: tokio::sync::Semaphore::new(limits.max_parallel as usize),
            shared: tokio::sync::Mutex::new(()),
            asks: tokio::sync::Mutex::new(()),
        })
    }

    fn header<'a>(&'a self, prepared: Option<&'a Prepared>) -> Header<'a> {
        Header {
            options: self.options,
            model: self.model.as_ref(),
            policy: self.policy,
            sandbox: Some(self.sandbox),
            prepared,
        }
    }

    /// The workspace as the agent finds it, and the state fingerprint.
    async fn record_start(&self) -> Result<(), StepError> {
        self.recorder
            .initial_snapshot()
            .await
            .step("recording the initial workspace")?;
        self.recorder
            .fingerprint(None)
            .await
            .step("recording the state fingerprint")
    }
}

/// Polls a stopped session's run while a group of subagents is recording its end (at most
/// 30 s); the group then goes no further.
async fn drain<F: Future>(mut run: std::pin::Pin<&mut F>, groups: &AtomicUsize) {
    let waited = async {
        while groups.load(Ordering::SeqCst) > 0 {
            tokio::select! {
                _ = run.as_mut() => return,
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(30), waited).await;
}

async fn sleep_for(duration: Duration) {
    match tokio::time::Instant::now().checked_add(duration) {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
