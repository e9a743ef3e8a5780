//! The seam between a session and what it is part of. A session runs an agent against a
//! sandbox and asks a grader for the outcome; it knows nothing of what it is part of. A
//! [`Provider`] gives it the sandbox, may name a stand-in that acts instead of the model, and
//! adds its own record to the log's header; the sandbox it gives is the [`Grader`] of the
//! agent's work. Without a provider the session starts its own sandbox (local, Docker, a URL,
//! a pool member) and grades with the task file's check
//! ([`CheckGrader`](super::check::CheckGrader)).

use std::path::Path;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use super::{SessionOutcome, Stop};
use crate::config::RunConfig;
use crate::input::InputError;
use crate::recording::Recorder;
use crate::run_loop::{Agent, Observer, Totals};
use crate::sandbox::{SandboxClient, StartError};
use crate::step::StepError;
use harness_log::{ContainerRecord, EventLog, ProviderRecord, SandboxKind};
use harness_models::Model;

/// Whoever starts a session's sandbox when the session does not (an adapter of tasks that
/// bring their own environment).
pub trait Provider: Send + Sync + std::fmt::Debug {
    /// What starts it, as a metrics label.
    fn label(&self) -> &'static str;
    /// What its sandbox is, as the log's header names it.
    fn kind(&self) -> SandboxKind;
    /// The token its sandbox will answer to: a new one, or one from a file.
    fn token(&self) -> Result<String, InputError>;
    /// What a batch warns about before it starts the task.
    fn warnings(&self) -> Vec<String>;
    /// What acts instead of the model, when something does (a task's own script, or nobody):
    /// its name, as the log's header records it.
    fn stand_in(&self) -> Option<&'static str>;
    /// The model that plays the stand-in.
    fn stand_in_model(&self) -> Result<Arc<dyn Model>, InputError>;
    /// The provider's own record in the log's header; `started` is the sandbox, once it
    /// started.
    fn record(&self, started: Option<&dyn Provided>) -> Option<ProviderRecord>;
    /// Starts (or reaches) the sandbox.
    fn start<'a>(
        &'a self,
        config: &'a RunConfig,
        context: ProviderContext<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn Provided>, StartError>>;
}

/// What a provider is told when it starts a session's sandbox.
#[derive(Clone, Copy)]
pub struct ProviderContext<'a> {
    pub session_id: &'a str,
    pub token: &'a str,
    pub observer: &'a dyn Observer,
}

/// A sandbox a provider started: reached through its client, asked whether it died, stopped,
/// and the grader of the agent's work in it.
pub trait Provided: Grader + std::fmt::Debug {
    fn client(&self) -> &SandboxClient;
    /// Its container, for the log's header.
    fn container(&self) -> Option<ContainerRecord>;
    /// The image it runs, when it is a container started here.
    fn image(&self) -> Option<&str>;
    /// Whether it is still there, once its server stopped answering.
    fn liveness(&mut self) -> BoxFuture<'_, Liveness>;
    /// Stops what the provider started (nothing, for a sandbox it only reached).
    fn stop(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// What became of a sandbox whose server stopped answering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// Still running: ask again.
    Running,
    /// Gone, and this is what happened to it.
    Exited(String),
    /// It cannot be told (a sandbox only reached), or asking failed (the detail).
    Unknown(Option<String>),
}

/// What a grader gets: the agent ready to run, and the session around it.
#[derive(Clone, Copy)]
pub struct Grading<'a> {
    pub agent: &'a Agent<'a>,
    pub system_prompt: &'a str,
    pub config: &'a RunConfig,
    pub client: &'a SandboxClient,
    pub recorder: &'a Recorder,
    pub observer: &'a dyn Observer,
    /// The session's own folder.
    pub log_dir: &'a Path,
    pub totals: &'a Mutex<Totals>,
}

/// Runs the agent as a task asks, and judges its work: the session's outcome and answer.
pub trait Grader: Send + Sync {
    /// After the log's header, before the workspace is recorded (the images a provider built).
    fn prepare<'a>(&'a self, log: &'a EventLog) -> BoxFuture<'a, Result<(), StepError>> {
        let _ = log;
        Box::pin(async { Ok(()) })
    }

    fn run<'a>(
        &'a self,
        grading: Grading<'a>,
    ) -> BoxFuture<'a, Result<(SessionOutcome, String), Stop>>;
}
