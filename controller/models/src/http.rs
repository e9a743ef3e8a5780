//! The one HTTP path of the three adapters: a provider's endpoint ([`Api`]) posts a request body
//! through the retries and the rate gate it shares, and decodes the answer into the adapter's
//! own typed answer.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::gate::{Gates, RateGate};
use super::retry::{RetryPolicy, post_json};
use super::{ModelError, Price};

/// What [`crate::build_gated`] gives every adapter: the model's name at its provider, its
/// price, a client and the retry policy.
pub(crate) struct Endpoint {
    pub(crate) name: String,
    pub(crate) price: Option<Price>,
    pub(crate) client: reqwest::Client,
    pub(crate) retry: RetryPolicy,
}

/// One provider endpoint, as an adapter posts to it.
pub(crate) struct Api {
    /// How errors name the provider, e.g. `Chat Completions API`.
    pub(crate) provider: &'static str,
    pub(crate) base_url: String,
    /// `base_url` and the path of the adapter's one route.
    url: String,
    /// Its credentials and version headers.
    headers: Vec<(&'static str, String)>,
    client: reqwest::Client,
    retry: RetryPolicy,
    /// Shared with every session on this endpoint (`harness batch`).
    gate: Option<Arc<RateGate>>,
}

impl Api {
    /// The endpoint at `base_url` + `path`; `gate_key` names the provider among the gates.
    pub(crate) fn new(
        provider: &'static str,
        endpoint: &Endpoint,
        base_url: String,
        path: &str,
        headers: Vec<(&'static str, String)>,
        gates: Option<(&Gates, &str)>,
    ) -> Api {
        Api {
            provider,
            url: format!("{}{path}", base_url.trim_end_matches('/')),
            gate: gates.map(|(gates, key)| gates.gate(key, &base_url)),
            base_url,
            headers,
            client: endpoint.client.clone(),
            retry: endpoint.retry,
        }
    }

    /// Posts `body`; the answer of the first 2xx, as it came.
    pub(crate) async fn post(&self, body: &Value) -> Result<Value, ModelError> {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        post_json(
            &self.client,
            self.provider,
            &self.url,
            &headers,
            body,
            self.retry,
            self.gate.as_deref(),
        )
        .await
    }

    /// An answer as the adapter's typed reply; what does not decode is named.
    pub(crate) fn decode<T: for<'de> Deserialize<'de>>(
        &self,
        raw: &Value,
    ) -> Result<T, ModelError> {
        T::deserialize(raw).map_err(|err| ModelError::BadResponse {
            provider: self.provider,
            message: err.to_string(),
        })
    }

    /// An endpoint that is never called, for the adapters' decoding tests.
    #[cfg(test)]
    pub(crate) fn unused(provider: &'static str) -> Api {
        let endpoint = Endpoint {
            name: "m".to_owned(),
            price: None,
            client: reqwest::Client::new(),
            retry: RetryPolicy::default(),
        };
        Api::new(
            provider,
            &endpoint,
            "http://127.0.0.1:9".to_owned(),
            "/",
            Vec::new(),
            None,
        )
    }
}

/// A tool call's arguments as the raw JSON text the model produced: a string as it is, and
/// (from a server that sends an object where the API says a string) any other JSON as its text.
pub(crate) fn arguments<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<String, D::Error> {
    Ok(match Value::deserialize(deserializer)? {
        Value::String(text) => text,
        Value::Null => String::new(),
        other => other.to_string(),
    })
}
