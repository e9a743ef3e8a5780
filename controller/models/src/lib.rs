//! Models: one [`Model`] trait, the provider adapters behind it, prices and retries.
//!
//! A model builds a `Request` whose body is exactly what goes out (the log records it first),
//! then sends it. Each vendor (`responses`, `chat`, `anthropic`) is an `adapter::Adapter` that
//! says only what is its own (path, body, how its answer decodes); one `adapter::Provider` is the
//! `Model` of all three, posting through `http::Api` (`retry`: 429, 5xx, broken connections,
//! `Retry-After`; [`gate`]: per-endpoint rate gates). Provider items (reasoning, thinking blocks)
//! are sent back verbatim. Models without a network are each an [`offline::Offline`].
//!
//! # This crate (`harness-models`)
//! Talks to model APIs and nothing else: it depends on the sandbox protocol (tool specs) and
//! `harness-telemetry` (throttling and gate waits), never on the log, the policy, the runtime
//! or a sandbox. What a reply means for a session is the run loop's business. Its failures are
//! [`ModelError`] (a call) and [`BuildError`] (a spec); it does not use `anyhow`.

mod adapter;
mod anthropic;
mod chat;
pub mod gate;
mod http;
pub mod offline;
pub mod pricing;
mod responses;
mod retry;
mod scripted;
mod types;

use std::sync::Arc;
use std::time::Duration;

use adapter::{Adapter, Provider};
use futures::future::BoxFuture;
use http::Endpoint;
use sandbox_protocol::ToolSpec;

pub use pricing::Price;
pub use retry::{RetryPolicy, refused_certificate};
pub use scripted::{ScriptedModel, schema as script_schema};
pub use types::{
    Ask, AssistantMessage, Message, ModelReply, Request, ToolCall, Usage, estimate_tokens,
};

/// A language model behind some provider's API.
pub trait Model: Send + Sync {
    /// How the model names itself in logs and messages, e.g. `openai/gpt-5 (Responses API)`.
    fn describe(&self) -> String;
    /// Whether its cost per token is known (a price was found or given).
    fn has_price(&self) -> bool;
    /// The request for the conversation and the tools it may call; its body exactly as it
    /// will be sent (the session log records it before it goes out).
    fn build_request(&self, messages: &[Message], tools: &[ToolSpec]) -> Request;
    /// A request for one JSON object that fits `schema` (structured output: a JSON schema for
    /// OpenAI's APIs, a forced tool for Anthropic). Its reply carries the object as its text,
    /// or as the arguments of its one tool call.
    fn structured_request(
        &self,
        instructions: &str,
        input: &str,
        name: &str,
        schema: &serde_json::Value,
    ) -> Request;
    /// Sends a request built by `build_request` or `structured_request`; retries are inside.
    fn send<'a>(&'a self, request: &'a Request) -> BoxFuture<'a, Result<ModelReply, ModelError>>;
    /// The model of the subagent the call `call_id` starts: `None` for this same model (a
    /// provider's adapter keeps no conversation); a scripted or replayed model gives the
    /// child's own script.
    fn subagent(&self, call_id: &str) -> Result<Option<Arc<dyn Model>>, ModelError> {
        let _ = call_id;
        Ok(None)
    }
}

/// One reply to the conversation: `build_request` then `send`.
pub async fn complete(
    model: &dyn Model,
    messages: &[Message],
    tools: &[ToolSpec],
) -> Result<ModelReply, ModelError> {
    let request = model.build_request(messages, tools);
    model.send(&request).await
}

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The provider answered with an error status; `message` is the provider's own.
    #[error("{provider} answered {status}: {message}")]
    Status {
        provider: &'static str,
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// The request did not complete: connection refused or reset, DNS, a timeout.
    #[error("{provider} request failed: {message}")]
    Transport {
        provider: &'static str,
        message: String,
    },
    /// The provider's TLS certificate was refused (an unknown CA, another name, expired): no
    /// retry makes it trusted.
    #[error(
        "{provider}'s TLS certificate was refused: {message} (for a private CA, add it to the system's store or point SSL_CERT_FILE at it)"
    )]
    Certificate {
        provider: &'static str,
        message: String,
    },
    /// The provider answered 2xx with something this adapter cannot use.
    #[error("{provider} answered with an unusable response: {message}")]
    BadResponse {
        provider: &'static str,
        message: String,
    },
    /// A required API key is not set.
    #[error("{variable} is not set: export it, or pick another model with --model")]
    MissingKey { variable: &'static str },
    /// The scripted model's file is unusable or has no turn left.
    #[error("scripted model: {0}")]
    Script(String),
    /// A scripted model's file has no classifier verdict left for a call the classifier
    /// judges: a mistake in the script, which stops the session.
    #[error("scripted model: {0}")]
    NoVerdict(String),
}

impl ModelError {
    /// Whether the same request may succeed later. Exhaustive on purpose: a new variant must
    /// decide.
    pub fn is_retryable(&self) -> bool {
        match self {
            ModelError::Status { status, .. } => *status == 408 || *status == 429 || *status >= 500,
            ModelError::Transport { .. } => true,
            ModelError::Certificate { .. }
            | ModelError::BadResponse { .. }
            | ModelError::MissingKey { .. }
            | ModelError::Script(_)
            | ModelError::NoVerdict(_) => false,
        }
    }
}

/// Which model to build, as the CLI and task files name it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSpec {
    /// `openai/NAME`, `openai-compat/NAME`, `anthropic/NAME` or `script:FILE`.
    pub name: String,
    pub base_url: Option<String>,
    pub reasoning_effort: Option<String>,
    pub web_search: bool,
    pub price: Option<Price>,
    pub max_tokens: u32,
    pub thinking_budget: Option<u32>,
}

/// Why a model could not be built from its spec: a name that is no model, a provider's missing
/// setting, or a scripted model's file.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(
        "--model {model}: expected PROVIDER/NAME (openai/…, openai-compat/…, anthropic/…) or script:FILE"
    )]
    NotAModel { model: String },
    #[error("--model {model}: the model name after `{provider}/` is empty")]
    EmptyName { model: String, provider: String },
    #[error(
        "--model {model}: unknown provider `{provider}`; use openai, openai-compat or anthropic"
    )]
    UnknownProvider { model: String, provider: String },
    #[error(
        "--model {model}: an OpenAI-compatible server needs --base-url (or OPENAI_BASE_URL), e.g. http://localhost:11434/v1"
    )]
    NoBaseUrl { model: String },
    /// The HTTP client could not be made (the system's TLS roots could not be read).
    #[error("the HTTP client for {model}")]
    Client {
        model: String,
        source: reqwest::Error,
    },
    /// A key that is not set, or a scripted model's file.
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// Builds the model named by `spec`. Keys come from the usual environment variables.
pub fn build(spec: &ModelSpec, retry: RetryPolicy) -> Result<Arc<dyn Model>, BuildError> {
    build_gated(spec, retry, None)
}

/// As [`build`], with the model's requests passing the gate of its endpoint from `gates`.
pub fn build_gated(
    spec: &ModelSpec,
    retry: RetryPolicy,
    gates: Option<&gate::Gates>,
) -> Result<Arc<dyn Model>, BuildError> {
    if let Some(path) = spec.name.strip_prefix("script:") {
        return Ok(Arc::new(ScriptedModel::load(std::path::Path::new(path))?));
    }
    let model = || spec.name.clone();
    let Some((provider, name)) = spec.name.split_once('/') else {
        return Err(BuildError::NotAModel { model: model() });
    };
    if name.is_empty() {
        let provider = provider.to_owned();
        return Err(BuildError::EmptyName {
            model: model(),
            provider,
        });
    }
    let endpoint = Endpoint {
        name: name.to_owned(),
        price: spec.price.or_else(|| pricing::builtin(provider, name)),
        client: reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .timeout(Duration::from_secs(600))
            .build()
            .map_err(|source| BuildError::Client {
                model: model(),
                source,
            })?,
        retry,
    };
    Ok(match provider {
        "openai" => {
            let settings = responses::Responses {
                reasoning_effort: spec.reasoning_effort.clone(),
                web_search: spec.web_search,
            };
            hosted(settings, OPENAI, bearer, spec, endpoint, gates)?
        }
        "openai-compat" => openai_compat(spec, endpoint, gates)?,
        "anthropic" => {
            let settings = anthropic::Anthropic {
                max_tokens: spec.max_tokens,
                thinking_budget: spec.thinking_budget,
            };
            hosted(
                settings,
                ANTHROPIC,
                anthropic_headers,
                spec,
                endpoint,
                gates,
            )?
        }
        other => {
            return Err(BuildError::UnknownProvider {
                model: model(),
                provider: other.to_owned(),
            });
        }
    })
}

/// An environment variable, when set and not blank.
fn env(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.trim().is_empty())
}

/// A hosted provider's model through `adapter`. `place` names the variable of its base URL,
/// the base URL when neither the flag nor that variable gives one, and the variable of its key,
/// which must be set and goes out in the headers `headers` makes of it.
fn hosted<A: Adapter>(
    adapter: A,
    place: [&'static str; 3],
    headers: fn(&str) -> Vec<(&'static str, String)>,
    spec: &ModelSpec,
    endpoint: Endpoint,
    gates: Option<&gate::Gates>,
) -> Result<Arc<dyn Model>, BuildError> {
    let [url_variable, default, key_variable] = place;
    let base_url = spec
        .base_url
        .clone()
        .or_else(|| env(url_variable))
        .unwrap_or_else(|| default.to_owned());
    let key = env(key_variable).ok_or(ModelError::MissingKey {
        variable: key_variable,
    })?;
    let model = Provider::new(adapter, endpoint, base_url, headers(&key), gates);
    Ok(Arc::new(model))
}

/// OpenAI's base-URL variable, default base URL and key variable (see [`hosted`]).
const OPENAI: [&str; 3] = [
    "OPENAI_BASE_URL",
    "https://api.openai.com/v1",
    "OPENAI_API_KEY",
];

/// Anthropic's base-URL variable, default base URL and key variable (see [`hosted`]).
const ANTHROPIC: [&str; 3] = [
    "ANTHROPIC_BASE_URL",
    "https://api.anthropic.com",
    "ANTHROPIC_API_KEY",
];

/// OpenAI's headers for `key`: a bearer token.
fn bearer(key: &str) -> Vec<(&'static str, String)> {
    vec![("authorization", format!("Bearer {key}"))]
}

/// Anthropic's headers for `key`: the key and the API version.
fn anthropic_headers(key: &str) -> Vec<(&'static str, String)> {
    vec![
        ("x-api-key", key.to_owned()),
        ("anthropic-version", anthropic::API_VERSION.to_owned()),
    ]
}

fn openai_compat(
    spec: &ModelSpec,
    endpoint: Endpoint,
    gates: Option<&gate::Gates>,
) -> Result<Arc<dyn Model>, BuildError> {
    let base_url = spec
        .base_url
        .clone()
        .or_else(|| env("OPENAI_BASE_URL"))
        .ok_or_else(|| BuildError::NoBaseUrl {
            model: spec.name.clone(),
        })?;
    // Optional: local servers usually need none.
    let headers = env("OPENAI_API_KEY")
        .as_deref()
        .map(bearer)
        .unwrap_or_default();
    let model = Provider::new(chat::Chat, endpoint, base_url, headers, gates);
    Ok(Arc::new(model))
}
