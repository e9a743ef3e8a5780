//! The first and last events of a session log: `session_started` with the effective
//! configuration (whatever of the prompt, tools and sandbox exist by then), and
//! `session_finished` with the outcome and totals.

use super::prepare::Prepared;
use super::sandbox::Sandbox;
use super::{SessionOptions, SessionSummary};
use crate::step::StepError;
use crate::subagent::spawn::finished_record;
use harness_log::{self, Event, EventLog, RunSettings, SessionFinished, SessionStarted, Text};
use harness_models::Model;
use harness_policy::Policy;

/// What the header says; `sandbox` and `prepared` are absent when the session failed first.
pub(super) struct Header<'a> {
    pub options: &'a SessionOptions,
    pub model: &'a dyn Model,
    pub policy: &'a dyn Policy,
    pub sandbox: Option<&'a Sandbox>,
    pub prepared: Option<&'a Prepared>,
}

impl Header<'_> {
    pub(super) async fn record(&self, log: &EventLog) -> Result<(), StepError> {
        let config = &self.options.config;
        // A fork's model has the parent's system prompt (with its hooks' words), not a new one.
        let resumed = self.options.resume.as_ref().and_then(|resume| {
            resume.messages.iter().find_map(|message| match message {
                harness_models::Message::System { content } => Some(content.as_str()),
                _ => None,
            })
        });
        let (system_prompt, tools) = match self.prepared {
            Some(prepared) => (
                Some(log.text(resumed.unwrap_or(&prepared.system.text))?),
                Some(log.json_blob(&tool_list(&prepared.tools)?)?),
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
            tool_names: self
                .prepared
                .map(|prepared| prepared.tools.iter().map(|t| t.name.clone()).collect())
                .unwrap_or_default(),
            policy: self.policy.name(),
            sandbox: config.sandbox.kind(),
            sandbox_url: self
                .sandbox
                .map(|sandbox| sandbox.client.url().to_owned())
                .unwrap_or_default(),
            container: self.sandbox.and_then(|sandbox| sandbox.container(config)),
            lifetime_secs: config.lifetime.map(|l| l.as_secs()),
            workspace_root: self.prepared.map(|p| p.workspace_root.clone()),
            working_dir: config
                .working_dir
                .as_ref()
                .map(|dir| dir.display().to_string()),
            setup: config.setup.clone(),
            check: config.check.clone(),
            log_durability: self.options.durability,
            agent: config
                .sandbox
                .provider()
                .and_then(|provider| provider.stand_in())
                .map(str::to_owned),
            // A subagent is no part of what its provider records: its parent is, and grades
            // the work.
            benchmark: config
                .sandbox
                .provider()
                .filter(|_| self.options.subagent.is_none())
                .and_then(|provider| provider.record(self.sandbox.and_then(|s| s.provided()))),
            subagents: config.subagents,
        };
        let started = SessionStarted {
            format_version: harness_log::FORMAT_VERSION,
            session_id: self.options.session_id.clone(),
            harness_version: env!("CARGO_PKG_VERSION").to_owned(),
            task: config.prompt.clone(),
            config: settings,
            system_prompt,
            tools,
            forked_from: self
                .options
                .resume
                .as_ref()
                .map(|resume| resume.forked_from.clone()),
            subagent_of: self.options.subagent.as_ref().map(|c| c.link.clone()),
        };
        log.record(Event::SessionStarted(Box::new(started))).await?;
        Ok(())
    }
}

/// Writes `session_finished` and closes the log.
pub(super) async fn finish(log: &EventLog, summary: &SessionSummary) {
    let empty = Text {
        text: Some(String::new()),
        blob: None,
        preview: None,
        size: 0,
    };
    let finished = finished_record!(SessionFinished, summary, {
        answer: log.text(&summary.answer).unwrap_or(empty),
    });
    if let Err(err) = log
        .record(Event::SessionFinished(finished))
        .await
        .and(log.close().await)
    {
        tracing::error!("closing the session log: {err}");
    }
}

/// The tools as the header lists them.
fn tool_list(tools: &[sandbox_protocol::ToolSpec]) -> Result<serde_json::Value, StepError> {
    serde_json::to_value(tools)
        .map_err(|err| StepError::harness(format!("listing the tools for the log: {err}")))
}
