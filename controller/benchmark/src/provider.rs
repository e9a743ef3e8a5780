//! A benchmark task as a session's [`Provider`]: its containers are the sandbox (started here
//! with a sandbox-server injected, or a pod's server reached at its URL), the task's oracle or
//! nobody is the agent when no model is, and its verifier grades ([`super::trial`]).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::BenchTask;
use super::agents::{NopModel, OracleModel};
use super::container::{StartSpec, TaskEnvironment};
use super::host::{ApiHost, TaskHost};
use super::paths::TaskRoot;
use super::run::{BenchRun, TaskPlace};
use super::trial::{Rounds, record_images};
use crate::flags::Agent;
use harness_log::{ContainerRecord, EventLog, NetworkRecord, ProviderRecord, SandboxKind};
use harness_models::Model;
use harness_runtime::config::RunConfig;
use harness_runtime::input::InputError;
use harness_runtime::sandbox::{Doing, SandboxClient, StartError};
use harness_runtime::session::provider::{
    Grader, Grading, Liveness, Provided, Provider, ProviderContext,
};
use harness_runtime::session::sandbox::{read_token, short};
use harness_runtime::session::{SessionOutcome, Stop};
use harness_runtime::step::describe;
use harness_runtime::step::{Step, StepError};

/// The task's `[metadata] expected_broken`: its author says its oracle does not pass, and why
/// (a demonstration, a known-bad task kept in a dataset); reports and a batch's display label
/// its failure expected.
pub fn expected_broken(task: &BenchTask) -> Option<String> {
    task.metadata
        .get("expected_broken")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}

/// The `[metadata] expected_not_runnable` of the Harbor task in `dir`: its author says this
/// harness cannot run it here, and why (a Windows task in a dataset run on Linux). Read from
/// its `task.toml` alone, as such a task does not load; `None` when that file is not the
/// task's own, does not read or parse, or has no such key.
pub fn expected_not_runnable(dir: &Path) -> Option<String> {
    let path = TaskRoot::of(dir)
        .ok()?
        .resolve(&dir.join("task.toml"), "task.toml")
        .ok()?;
    let text = std::fs::read_to_string(path).ok()?;
    let config: toml::Table = toml::from_str(&text).ok()?;
    config
        .get("metadata")?
        .get("expected_not_runnable")?
        .as_str()
        .map(str::to_owned)
}

/// A benchmark task's run, as the provider of its session's sandbox.
#[derive(Debug)]
pub struct TaskProvider {
    pub run: Arc<BenchRun>,
}

impl Provider for TaskProvider {
    fn label(&self) -> &'static str {
        "task"
    }

    fn kind(&self) -> SandboxKind {
        SandboxKind::Docker
    }

    fn token(&self) -> Result<String, InputError> {
        match &self.run.place {
            TaskPlace::Remote {
                token_file: Some(file),
                ..
            } => read_token(file),
            TaskPlace::Remote { .. } => Ok(String::new()),
            TaskPlace::Docker { .. } => Ok(format!("{:032x}", rand::random::<u128>())),
        }
    }

    fn warnings(&self) -> Vec<String> {
        self.run.task.warnings.clone()
    }

    fn stand_in(&self) -> Option<&'static str> {
        (self.run.agent != Agent::Model).then(|| self.run.agent.as_str())
    }

    fn stand_in_model(&self) -> Result<Arc<dyn Model>, InputError> {
        let task = &self.run.task;
        match self.run.agent {
            Agent::Oracle => match OracleModel::new(task) {
                Some(oracle) => Ok(Arc::new(oracle)),
                None => Err(InputError(format!(
                    "{}: the task has no solution",
                    task.name
                ))),
            },
            Agent::Nop => Ok(Arc::new(NopModel)),
            Agent::Model => Err(InputError(format!(
                "{}: a model agent is not the task's",
                task.name
            ))),
        }
    }

    fn record(&self, started: Option<&dyn Provided>) -> Option<ProviderRecord> {
        let task = &self.run.task;
        Some(ProviderRecord {
            format: task.format.as_str().to_owned(),
            name: task.name.clone(),
            dir: task.dir.display().to_string(),
            digest: task.digest.clone(),
            image: started
                .and_then(|s| s.image())
                .map(str::to_owned)
                .unwrap_or_default(),
            online: task.network.agent == super::NetworkPolicy::Public,
            network: Some(NetworkRecord {
                baseline: task.network.baseline.describe(),
                agent: task.network.agent.describe(),
                verifier: task.network.verifier.describe(),
            }),
            expected_broken: expected_broken(task),
        })
    }

    fn start<'a>(
        &'a self,
        config: &'a RunConfig,
        context: ProviderContext<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn Provided>, StartError>> {
        Box::pin(self.start_task(config, context))
    }
}

impl TaskProvider {
    /// The task's containers (started here), or its server already running in the task's
    /// image (a pod).
    async fn start_task(
        &self,
        config: &RunConfig,
        context: ProviderContext<'_>,
    ) -> Result<Box<dyn Provided>, StartError> {
        let ProviderContext {
            session_id,
            token,
            observer,
        } = context;
        let run = &self.run;
        let (settings, server, internet) = match &run.place {
            TaskPlace::Docker {
                build,
                server,
                internet,
            } => (build, server, internet),
            TaskPlace::Remote { url, tls, .. } => {
                let token = Some(token.to_owned()).filter(|t| !t.is_empty());
                let client = SandboxClient::with_tls(url, token, tls)
                    .map_err(|err| StartError::BadInput(err.to_string()))?;
                client
                    .wait_healthy(Duration::from_secs(30))
                    .await
                    .doing_with(|| format!("reaching the task's sandbox at {url}"))?;
                let host = ApiHost { client };
                return Ok(Box::new(TaskSandbox {
                    host: Host::Remote(host),
                    run: run.clone(),
                }));
            }
        };
        for warning in &run.task.warnings {
            observer.note(&format!("warning: {}: {warning}", run.task.name));
        }
        let note = |text: &str| observer.note(text);
        let tools = harness_runtime::subagent::server_tools(config.tools.as_deref());
        let spec = StartSpec {
            task: &run.task,
            session_id,
            token,
            server_binary: server,
            settings,
            internet,
            tools: tools.as_deref(),
            main_image: None,
            note: &note,
        };
        let environment = TaskEnvironment::start(&spec).await?;
        observer.note(&format!(
            "sandbox: container {} of {} (working folder {})",
            short(&environment.main_id),
            environment.image,
            environment.workdir
        ));
        Ok(Box::new(TaskSandbox {
            host: Host::Started(Box::new(environment)),
            run: run.clone(),
        }))
    }
}

/// A benchmark task's sandbox: its containers, and the grader of the agent's work in them.
#[derive(Debug)]
struct TaskSandbox {
    host: Host,
    run: Arc<BenchRun>,
}

#[derive(Debug)]
enum Host {
    /// Its containers, started here.
    Started(Box<TaskEnvironment>),
    /// Its container someone else started (a pod): reached, not stopped.
    Remote(ApiHost),
}

impl TaskSandbox {
    fn task_host(&self) -> &dyn TaskHost {
        match &self.host {
            Host::Started(environment) => environment.as_ref(),
            Host::Remote(host) => host,
        }
    }
}

impl Provided for TaskSandbox {
    fn client(&self) -> &SandboxClient {
        match &self.host {
            Host::Started(environment) => &environment.client,
            Host::Remote(host) => &host.client,
        }
    }

    fn container(&self) -> Option<ContainerRecord> {
        let Host::Started(environment) = &self.host else {
            return None;
        };
        let resources = &self.run.task.resources;
        Some(ContainerRecord {
            id: environment.main_id.clone(),
            image: environment.image.clone(),
            memory_bytes: resources.memory_mb.map(|mb| (mb << 20) as i64),
            cpus: resources.cpus,
            pids: None,
        })
    }

    fn image(&self) -> Option<&str> {
        match &self.host {
            Host::Started(environment) => Some(&environment.image),
            Host::Remote(_) => None,
        }
    }

    fn liveness(&mut self) -> BoxFuture<'_, Liveness> {
        Box::pin(async move {
            let Host::Started(environment) = &self.host else {
                return Liveness::Unknown(None);
            };
            match environment.state().await {
                Ok(state) if !state.running => {
                    let id = short(&environment.main_id);
                    Liveness::Exited(format!("the task's container {id} {}", state.describe()))
                }
                Ok(_) => Liveness::Running,
                Err(err) => {
                    Liveness::Unknown(Some(format!("the Docker engine: {}", describe(&err))))
                }
            }
        })
    }

    fn stop(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            if let Host::Started(mut environment) = self.host {
                environment.remove().await;
            }
        })
    }
}

impl Grader for TaskSandbox {
    /// The images' record: the engine's and the harness's part, never the sandbox's.
    fn prepare<'a>(&'a self, log: &'a EventLog) -> BoxFuture<'a, Result<(), StepError>> {
        Box::pin(async move {
            match &self.host {
                Host::Started(environment) => record_images(log, environment)
                    .await
                    .step("recording the images"),
                Host::Remote(_) => Ok(()),
            }
        })
    }

    fn run<'a>(
        &'a self,
        grading: Grading<'a>,
    ) -> BoxFuture<'a, Result<(SessionOutcome, String), Stop>> {
        Box::pin(async move {
            let rounds = Rounds {
                g: grading,
                host: self.task_host(),
                run: &self.run,
            };
            rounds.run_bench().await
        })
    }
}
