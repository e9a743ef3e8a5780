//! The model a session talks to, from its config: a provider's, a scripted one, the recorded
//! replies of an earlier session (`replay:RUN`), or a benchmark task's oracle or nop agent.

use std::sync::Arc;

use anyhow::Context;

use crate::config::{AgentKind, RunConfig};
use crate::event_log::reader;
use crate::llm::{self, Model, RetryPolicy, gate::Gates};
use crate::replay::model::ReplayModel;

/// Builds the model; its requests pass the gate of its endpoint from `gates`.
pub fn build_model(config: &RunConfig, gates: Option<&Gates>) -> anyhow::Result<Arc<dyn Model>> {
    if config.agent != AgentKind::Model {
        let provider = config
            .sandbox
            .provider()
            .with_context(|| format!("--agent {} needs a benchmark task", config.agent.as_str()))?;
        return provider.agent_model(config.agent);
    }
    let spec = &config.model;
    if let Some(path) = spec.name.strip_prefix("replay:") {
        let dir = reader::session_dir(std::path::Path::new(path));
        return Ok(Arc::new(ReplayModel::load(&dir)?));
    }
    llm::build_gated(spec, RetryPolicy::default(), gates)
}
