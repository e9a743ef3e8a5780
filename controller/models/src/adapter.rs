//! What the three provider adapters share. An [`Adapter`] says how one vendor's API writes a
//! request and reads an answer, and nothing else; [`Provider`] is the [`Model`] around any of
//! them: the model's name and price, its endpoint on the one HTTP path ([`Api`]), and the reply
//! priced with the raw answer kept for the log.

use futures::future::BoxFuture;
use sandbox_protocol::ToolSpec;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::gate::Gates;
use super::http::{Api, Endpoint};
use super::{AssistantMessage, Message, Model, ModelError, ModelReply, Price, Request, Usage};

/// A question for one JSON object that fits `schema` (see [`Model::structured_request`]).
pub(crate) struct Question<'a> {
    pub(crate) instructions: &'a str,
    pub(crate) input: &'a str,
    pub(crate) name: &'a str,
    pub(crate) schema: &'a Value,
}

/// One vendor's API.
pub(crate) trait Adapter: Send + Sync + 'static {
    /// The vendor's answer, as far as the adapter reads it.
    type Answer: DeserializeOwned;
    /// How errors name the API, e.g. `Anthropic Messages API`.
    const PROVIDER: &'static str;
    /// The provider in `--model PROVIDER/NAME`, also the key of its rate gate.
    const FAMILY: &'static str;
    /// The API as [`Model::describe`] names it, e.g. `Messages API`.
    const API: &'static str;
    /// The route under the base URL.
    const PATH: &'static str;

    /// The body of a request for the conversation and the tools `model` may call.
    fn body(&self, model: &str, messages: &[Message], tools: &[ToolSpec]) -> Value;
    /// The body of a request for the answer to `question`.
    fn structured_body(&self, model: &str, question: &Question<'_>) -> Value;
    /// The assistant's message and the tokens it took, from a decoded answer (`raw` is the
    /// answer as it came, for the items to be sent back verbatim).
    fn read(
        &self,
        answer: Self::Answer,
        raw: &Value,
    ) -> Result<(AssistantMessage, Usage), ModelError>;

    /// An answer that was 2xx but unusable, for the reason `message`.
    fn bad(message: impl Into<String>) -> ModelError {
        ModelError::BadResponse {
            provider: Self::PROVIDER,
            message: message.into(),
        }
    }
}

/// A model behind a vendor's API.
pub(crate) struct Provider<A> {
    api: Api,
    name: String,
    price: Option<Price>,
    adapter: A,
}

impl<A: Adapter> Provider<A> {
    /// The model `endpoint` names, at `base_url` with `headers` (its credentials and version),
    /// through the gate of its provider in `gates`.
    pub(crate) fn new(
        adapter: A,
        endpoint: Endpoint,
        base_url: String,
        headers: Vec<(&'static str, String)>,
        gates: Option<&Gates>,
    ) -> Provider<A> {
        let gate = gates.map(|gates| (gates, A::FAMILY));
        Provider {
            api: Api::new(A::PROVIDER, &endpoint, base_url, A::PATH, headers, gate),
            name: endpoint.name,
            price: endpoint.price,
            adapter,
        }
    }

    /// The reply in an answer as it came.
    fn reply(&self, raw: Value) -> Result<ModelReply, ModelError> {
        let answer = self.api.decode(&raw)?;
        let (message, usage) = self.adapter.read(answer, &raw)?;
        Ok(ModelReply::priced(message, usage, self.price, raw))
    }
}

impl<A: Adapter> Model for Provider<A> {
    fn describe(&self) -> String {
        format!(
            "{}/{} ({} at {})",
            A::FAMILY,
            self.name,
            A::API,
            self.api.base_url
        )
    }

    fn has_price(&self) -> bool {
        self.price.is_some()
    }

    fn build_request(&self, messages: &[Message], tools: &[ToolSpec]) -> Request {
        let body = self.adapter.body(&self.name, messages, tools);
        Request::reply(body, messages, tools)
    }

    fn structured_request(
        &self,
        instructions: &str,
        input: &str,
        name: &str,
        schema: &Value,
    ) -> Request {
        let question = Question {
            instructions,
            input,
            name,
            schema,
        };
        let body = self.adapter.structured_body(&self.name, &question);
        Request::structured(body, name)
    }

    fn send<'a>(&'a self, request: &'a Request) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move { self.reply(self.api.post(&request.body).await?) })
    }
}

/// The reply `adapter` reads in the answer `raw`, for the adapters' decoding tests.
#[cfg(test)]
pub(crate) fn decode<A: Adapter>(adapter: A, raw: Value) -> Result<ModelReply, ModelError> {
    let provider = Provider {
        api: Api::unused(A::PROVIDER),
        name: "m".to_owned(),
        price: None,
        adapter,
    };
    provider.reply(raw)
}
