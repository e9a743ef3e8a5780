//! An HTTP double of the three model APIs. Every request body is validated against the
//! vendor's published schema (subsets in `controller/tests/specs/`, with their licenses);
//! answers come from a queue the test fills; every request is captured for assertions.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// Which vendor schema a body is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Schema {
    CreateResponse,
    Response,
    CreateChatCompletionRequest,
    CreateChatCompletionResponse,
    CreateMessageRequest,
    Message,
}

impl Schema {
    fn source(self) -> (&'static str, &'static str) {
        match self {
            Schema::CreateResponse => ("openai", "CreateResponse"),
            Schema::Response => ("openai", "Response"),
            Schema::CreateChatCompletionRequest => ("openai", "CreateChatCompletionRequest"),
            Schema::CreateChatCompletionResponse => ("openai", "CreateChatCompletionResponse"),
            Schema::CreateMessageRequest => ("anthropic", "CreateMessageRequest"),
            Schema::Message => ("anthropic", "Message"),
        }
    }
}

fn spec(name: &str) -> &'static Value {
    static SPECS: OnceLock<HashMap<&'static str, Value>> = OnceLock::new();
    let specs = SPECS.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/specs");
        ["openai", "anthropic"]
            .into_iter()
            .map(|name| {
                let text = std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap();
                (name, serde_json::from_str(&text).unwrap())
            })
            .collect()
    });
    &specs[name]
}

/// The schema violations of `body`, each as `path: message`; empty when it fits.
pub fn violations(schema: Schema, body: &Value) -> Vec<String> {
    static VALIDATORS: OnceLock<Mutex<HashMap<Schema, Arc<jsonschema::Validator>>>> =
        OnceLock::new();
    let validator = {
        let mut cache = VALIDATORS.get_or_init(Default::default).lock().unwrap();
        cache
            .entry(schema)
            .or_insert_with(|| {
                let (file, name) = schema.source();
                let mut root = spec(file).clone();
                root["$ref"] = json!(format!("#/components/schemas/{name}"));
                Arc::new(
                    jsonschema::validator_for(&root)
                        .unwrap_or_else(|err| panic!("compiling {name}: {err}")),
                )
            })
            .clone()
    };
    validator
        .iter_errors(body)
        .map(|err| format!("{}: {err}", err.instance_path()))
        .collect()
}

/// Panics unless `body` fits `schema`.
pub fn assert_fits(schema: Schema, body: &Value) {
    let problems = violations(schema, body);
    assert!(
        problems.is_empty(),
        "{schema:?} violations:\n{}\nbody: {body:#}",
        problems.join("\n")
    );
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Answer {
    Json(Value),
    /// Answers after a delay (bounded by the test's own timeouts).
    Slow {
        seconds: u64,
        body: Value,
    },
    Status {
        status: u16,
        retry_after: Option<String>,
        body: Value,
    },
}

/// A request the double received.
#[derive(Debug, Clone)]
pub struct Captured {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
    /// When it arrived.
    pub at: std::time::Instant,
}

#[derive(Default)]
struct Inner {
    answers: VecDeque<Answer>,
    requests: Vec<Captured>,
    violations: Vec<String>,
}

#[derive(Clone)]
pub struct ModelDouble {
    pub base: String,
    inner: Arc<Mutex<Inner>>,
}

impl ModelDouble {
    fn app() -> (Router, Arc<Mutex<Inner>>) {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let app = Router::new()
            .route("/v1/responses", post(handle))
            .route("/v1/chat/completions", post(handle))
            .route("/v1/messages", post(handle))
            .with_state(inner.clone());
        (app, inner)
    }

    pub async fn start() -> ModelDouble {
        let (app, inner) = ModelDouble::app();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        ModelDouble {
            base: format!("http://{address}"),
            inner,
        }
    }

    /// The double behind HTTPS with this certificate (PEM) and key, at `https://localhost:PORT`.
    pub async fn start_tls(cert: &str, key: &str) -> ModelDouble {
        use rustls::pki_types::pem::PemObject;
        let (app, inner) = ModelDouble::app();
        let certs = rustls::pki_types::CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, app) = (acceptor.clone(), app.clone());
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        ModelDouble {
            base: format!("https://localhost:{port}"),
            inner,
        }
    }

    /// `harness run --model openai-compat/MODEL --base-url <this double> ARGS…`.
    pub fn harness_run(&self, model: &str, args: &[&str]) -> std::process::Command {
        let model = format!("openai-compat/{model}");
        let base_url = format!("{}/v1", self.base);
        let mut all = vec!["run", "--model", &model, "--base-url", &base_url];
        all.extend_from_slice(args);
        crate::common::command(&all)
    }

    /// `harness ARGS` with an OpenAI key and this double as OpenAI's endpoint.
    pub fn openai_command(&self, args: &[&str]) -> std::process::Command {
        let mut command = crate::common::command(args);
        command
            .env("OPENAI_API_KEY", "sk-test")
            .env("OPENAI_BASE_URL", format!("{}/v1", self.base));
        command
    }

    /// `harness ARGS` with an Anthropic key and this double as Anthropic's endpoint.
    pub fn anthropic_command(&self, args: &[&str]) -> std::process::Command {
        let mut command = crate::common::command(args);
        command
            .env("ANTHROPIC_API_KEY", "ak-test")
            .env("ANTHROPIC_BASE_URL", &self.base);
        command
    }

    pub fn push(&self, answer: Answer) {
        self.inner.lock().unwrap().answers.push_back(answer);
    }

    pub fn push_json(&self, body: Value) {
        self.push(Answer::Json(body));
    }

    pub fn requests(&self) -> Vec<Captured> {
        self.inner.lock().unwrap().requests.clone()
    }

    /// Panics if any request broke its schema or the script ran out.
    pub fn assert_clean(&self) {
        let inner = self.inner.lock().unwrap();
        assert!(
            inner.violations.is_empty(),
            "requests broke the vendor schema:\n{}",
            inner.violations.join("\n\n")
        );
        assert!(
            inner.answers.is_empty(),
            "{} scripted answers were never asked for",
            inner.answers.len()
        );
    }
}

async fn handle(
    State(inner): State<Arc<Mutex<Inner>>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let body: Value = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(err) => {
            inner
                .lock()
                .unwrap()
                .violations
                .push(format!("{path}: body is not JSON: {err}"));
            return (StatusCode::BAD_REQUEST, "not JSON").into_response();
        }
    };
    let schema = match path.as_str() {
        "/v1/responses" => Schema::CreateResponse,
        "/v1/chat/completions" => Schema::CreateChatCompletionRequest,
        _ => Schema::CreateMessageRequest,
    };
    let problems = violations(schema, &body);
    let answer = {
        let mut inner = inner.lock().unwrap();
        if !problems.is_empty() {
            inner.violations.push(format!(
                "{path} ({schema:?}):\n{}\nbody: {body:#}",
                problems.join("\n")
            ));
        }
        inner.requests.push(Captured {
            path,
            headers,
            body,
            at: std::time::Instant::now(),
        });
        inner.answers.pop_front()
    };
    match answer {
        Some(Answer::Slow { seconds, body }) => {
            tokio::time::sleep(std::time::Duration::from_secs(seconds)).await;
            axum::Json(body).into_response()
        }
        Some(Answer::Json(value)) => axum::Json(value).into_response(),
        Some(Answer::Status {
            status,
            retry_after,
            body,
        }) => {
            let mut response =
                (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response();
            if let Some(after) = retry_after {
                response
                    .headers_mut()
                    .insert("retry-after", after.parse().unwrap());
            }
            response
        }
        None => (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({"error": {"message": "the double has no scripted answer"}})),
        )
            .into_response(),
    }
}

// ---- Builders of realistic answers; each is checked against the vendor's response schema. ----

/// A completed Responses API answer with `items` as output.
pub fn ev_response(items: &[Value], input_tokens: u64, cached: u64, output_tokens: u64) -> Value {
    let body = json!({
        "id": "resp_test", "object": "response", "created_at": 1_764_460_800, "status": "completed",
        "completed_at": 1_764_460_801,
        "error": null, "incomplete_details": null, "instructions": null, "model": "gpt-5",
        "output": items, "parallel_tool_calls": true, "metadata": {}, "tool_choice": "auto",
        "tools": [], "temperature": 1.0, "top_p": 1.0,
        "usage": {
            "input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
    });
    assert_fits(Schema::Response, &body);
    body
}

pub fn ev_reasoning(id: &str) -> Value {
    json!({"type": "reasoning", "id": id, "summary": [], "encrypted_content": "opaque-reasoning-state"})
}

pub fn ev_function_call(call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"type": "function_call", "id": format!("fc_{call_id}"), "call_id": call_id, "name": name, "arguments": arguments, "status": "completed"})
}

pub fn ev_message(text: &str) -> Value {
    json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
           "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})
}

/// A Chat Completions answer; `calls` are (id, name, arguments).
pub fn ev_chat(
    content: Option<&str>,
    calls: &[(&str, &str, &str)],
    prompt_tokens: u64,
    completion_tokens: u64,
) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
        .collect();
    let mut message = json!({"role": "assistant", "content": content, "refusal": null});
    if !tool_calls.is_empty() {
        message["tool_calls"] = json!(tool_calls);
    }
    let body = json!({
        "id": "chatcmpl-test", "object": "chat.completion", "created": 1_764_460_800, "model": "local-model",
        "choices": [{"index": 0, "message": message, "logprobs": null,
                     "finish_reason": if calls.is_empty() { "stop" } else { "tool_calls" }}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens},
    });
    assert_fits(Schema::CreateChatCompletionResponse, &body);
    body
}

/// An Anthropic Messages answer with `blocks` as content.
pub fn ev_anthropic(
    blocks: &[Value],
    stop_reason: &str,
    input_tokens: u64,
    output_tokens: u64,
) -> Value {
    let body = json!({
        "id": "msg_test", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        // `stop_sequence` is null unless a stop sequence ended the reply (Anthropic's docs); the
        // curated spec types it as a plain string, so the double leaves it out rather than
        // send a value the real API never would.
        "content": blocks, "stop_reason": stop_reason,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
    });
    assert_fits(Schema::Message, &body);
    body
}
