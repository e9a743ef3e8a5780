//! The model a session talks to, from its name: a provider's, a scripted one, or the recorded
//! replies of an earlier session (`replay:RUN`).

use std::sync::Arc;

use crate::event_log::reader;
use crate::llm::{self, Model, ModelSpec, RetryPolicy, gate::Gates};
use crate::replay::model::ReplayModel;

/// Builds the model; its requests pass the gate of its endpoint from `gates`.
pub fn build_model(spec: &ModelSpec, gates: Option<&Gates>) -> anyhow::Result<Arc<dyn Model>> {
    if let Some(path) = spec.name.strip_prefix("replay:") {
        let dir = reader::session_dir(std::path::Path::new(path));
        return Ok(Arc::new(ReplayModel::load(&dir)?));
    }
    llm::build_gated(spec, RetryPolicy::default(), gates)
}
