//! The `Tool` trait and the registry of enabled tools.
//!
//! A tool is one type implementing [`Tool`]: its name, description, argument and result
//! types (whose JSON Schemas are derived, never written by hand) and an async `execute`.
//! Adding a tool is one file in `tools/` and one line in `tools::builtin`; the order of
//! registration is the order in which tools are listed to the model.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use sandbox_protocol::ToolSpec;
use serde::Serialize;
use serde::de::DeserializeOwned;
use utoipa::ToSchema;
use utoipa::openapi::{RefOr, Schema};

use super::output::ArtifactStore;
use super::workspace::{Workspace, WorkspaceError};
use crate::process::{ProcessError, Supervisor};

/// Checks on arguments that a type cannot express (ranges, non-empty strings).
pub trait Validate {
    /// An error names the field: `timeout: must be between 1 and 3600, got 0`.
    fn validate(&self) -> Result<(), String>;
}

/// What a tool may use while it runs.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub workspace: Arc<Workspace>,
    pub artifacts: ArtifactStore,
    pub supervisor: Supervisor,
    pub limits: Arc<ToolLimits>,
    /// The processes and shells started by id (`exec` starts its commands there).
    pub processes: super::processes::ProcessTable,
    /// The id of the call being run (a command's processes carry it); set per call.
    pub call_id: Option<String>,
}

/// Limits that tools apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolLimits {
    pub output_limit_chars: usize,
    pub default_timeout_secs: u32,
    pub max_timeout_secs: u32,
    pub kill_grace_ms: u64,
}

/// A tool plugin.
/// What a tool is, said once where it is defined.
pub struct About {
    /// The built-in it is; its name is unique and snake_case, and its endpoint is
    /// `POST /v1/tools/{name}`.
    pub tool: sandbox_protocol::BuiltIn,
    /// What the model reads to decide when to use the tool.
    pub description: &'static str,
    /// The scope a token needs to call it.
    pub scope: sandbox_protocol::Scope,
}

pub trait Tool: Send + Sync + 'static {
    type Args: DeserializeOwned + ToSchema + Validate + Send + 'static;
    type Output: Serialize + ToSchema + Send + 'static;

    /// Its name, what the model reads, the scope a token needs.
    const ABOUT: About;
    fn execute(
        &self,
        args: Self::Args,
        ctx: ToolContext,
    ) -> impl Future<Output = Result<Self::Output, ToolError>> + Send;
}

/// Why a tool call failed. A non-zero exit or a timeout is not a failure.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit the schema or its ranges; nothing ran.
    #[error("{0}")]
    InvalidArguments(String),
    /// The path was refused or could not be used.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// `read_file` on a file that is not text.
    #[error("{0}")]
    BinaryFile(String),
    /// `search_replace` found the search text zero times or more than once.
    #[error("{message}")]
    MatchCount { message: String, count: usize },
    /// A process could not be started or signalled.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// A process started by id was unknown or not in a state for the call.
    #[error(transparent)]
    Managed(#[from] super::processes::ManagedError),
    /// A failure of the server itself (artifact store, a panicked task).
    #[error("{0}")]
    Internal(String),
}

/// The OpenAPI pieces of one tool.
pub struct ToolSchemas {
    pub args_name: String,
    pub output_name: String,
    pub components: Vec<(String, RefOr<Schema>)>,
}

/// A [`Tool`] with its types erased, as the registry holds it.
pub trait DynTool: Send + Sync {
    fn name(&self) -> &'static str;
    fn description(&self) -> &'static str;
    fn scope(&self) -> sandbox_protocol::Scope;
    /// The JSON Schema of the arguments, ready for a model API.
    fn parameters(&self) -> serde_json::Value;
    fn schemas(&self) -> ToolSchemas;
    /// Parses and validates `body`, then runs the tool.
    fn call(
        &self,
        body: &[u8],
        ctx: ToolContext,
    ) -> BoxFuture<'_, Result<serde_json::Value, ToolError>>;
}

impl<T: Tool> DynTool for T {
    fn name(&self) -> &'static str {
        T::ABOUT.tool.as_str()
    }

    fn description(&self) -> &'static str {
        T::ABOUT.description
    }

    fn scope(&self) -> sandbox_protocol::Scope {
        T::ABOUT.scope
    }

    fn parameters(&self) -> serde_json::Value {
        let mut schema = serde_json::to_value(<T::Args as utoipa::PartialSchema>::schema())
            .expect("a derived schema always serializes");
        // Examples are for people reading the OpenAPI document, not for the model.
        if let Some(object) = schema.as_object_mut() {
            object.remove("example");
            object.remove("examples");
        }
        schema
    }

    fn schemas(&self) -> ToolSchemas {
        let mut components = vec![
            (
                T::Args::name().into_owned(),
                <T::Args as utoipa::PartialSchema>::schema(),
            ),
            (
                T::Output::name().into_owned(),
                <T::Output as utoipa::PartialSchema>::schema(),
            ),
        ];
        T::Args::schemas(&mut components);
        T::Output::schemas(&mut components);
        ToolSchemas {
            args_name: T::Args::name().into_owned(),
            output_name: T::Output::name().into_owned(),
            components,
        }
    }

    fn call(
        &self,
        body: &[u8],
        ctx: ToolContext,
    ) -> BoxFuture<'_, Result<serde_json::Value, ToolError>> {
        let args = parse_args::<T::Args>(body);
        Box::pin(async move {
            let args = args?;
            let output = self.execute(args, ctx).await?;
            serde_json::to_value(output)
                .map_err(|err| ToolError::Internal(format!("serializing the result: {err}")))
        })
    }
}

/// Deserializes and validates arguments; errors name the field.
pub fn parse_args<A: DeserializeOwned + Validate>(body: &[u8]) -> Result<A, ToolError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ToolError::InvalidArguments(
            "request body is empty: send the tool's arguments as a JSON object".to_owned(),
        ));
    }
    // serde would also accept a struct as a JSON array of its fields; a tool takes an object.
    let first = body.iter().copied().find(|b| !b.is_ascii_whitespace());
    if first != Some(b'{') {
        let kind = match first {
            Some(b'[') => "an array",
            Some(b'"') => "a string",
            Some(b'n') => "null",
            Some(b't' | b'f') => "a boolean",
            Some(b'-' | b'0'..=b'9') => "a number",
            _ => "not JSON",
        };
        return Err(ToolError::InvalidArguments(format!(
            "the arguments must be a JSON object, got {kind}"
        )));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let args: A = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ToolError::InvalidArguments(format!("body is not valid JSON: {inner}"))
        } else {
            ToolError::InvalidArguments(sandbox_protocol::call::field_error(
                &path,
                &inner.to_string(),
            ))
        }
    })?;
    deserializer
        .end()
        .map_err(|err| ToolError::InvalidArguments(format!("body is not valid JSON: {err}")))?;
    args.validate().map_err(ToolError::InvalidArguments)?;
    Ok(args)
}

/// The enabled tools, in listing order.
#[derive(Clone, Default)]
pub struct Registry {
    tools: Vec<Arc<dyn DynTool>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Registry {
    /// Adds a tool at the end of the listing. Panics on a duplicate name: that is a bug.
    pub fn register<T: Tool>(&mut self, tool: T) {
        let name = T::ABOUT.tool.as_str();
        assert!(self.get(name).is_none(), "tool `{name}` registered twice");
        self.tools.push(Arc::new(tool));
    }

    /// Keeps only `names`, in registration order; an unknown name is an error naming it.
    pub fn select(self, names: &[String]) -> Result<Registry, String> {
        for name in names {
            if self.get(name).is_none() {
                return Err(format!(
                    "unknown tool `{name}`; known tools: {}",
                    self.names().join(", ")
                ));
            }
        }
        let tools = self
            .tools
            .into_iter()
            .filter(|tool| names.iter().any(|n| n == tool.name()))
            .collect();
        Ok(Registry { tools })
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn DynTool>> {
        self.tools.iter().find(|tool| tool.name() == name).cloned()
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.tools.iter().map(|tool| tool.name()).collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn DynTool>> {
        self.tools.iter()
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|tool| ToolSpec {
                name: tool.name().to_owned(),
                description: tool.description().to_owned(),
                parameters: tool.parameters(),
            })
            .collect()
    }
}
