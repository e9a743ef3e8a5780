//! One model call, logged before it is sent (the full request body) and after it answers
//! (text, tool calls, usage, cost, latency, the raw response).

use std::sync::Mutex;
use std::time::Instant;

use sandbox_protocol::ToolSpec;
use tracing::Instrument as _;

use super::{Agent, SessionError, Totals};
use harness_log::{Event, LoggedCall, LoggedUsage, ModelRequest, ModelResponse, Purpose};
use harness_models::{Message, ModelReply, Usage, estimate_tokens};

impl Agent<'_> {
    /// One model call, logged before it is sent and after it answers.
    pub(super) async fn ask(
        &self,
        messages: &[Message],
        tools: &[ToolSpec],
        turn: u32,
        purpose: Purpose,
        totals: &Mutex<Totals>,
    ) -> Result<ModelReply, SessionError> {
        let request = self.model.build_request(messages, tools);
        let logged = ModelRequest {
            turn,
            purpose,
            n_messages: messages.len() as u64,
            estimated_tokens: estimate_tokens(messages) as u64,
            body: self.recorder.log.json_blob(&request.body)?,
        };
        self.recorder
            .log
            .record(Event::ModelRequest(logged))
            .await?;
        let started = Instant::now();
        let reply = self.send_observed(&request, turn, purpose).await?;
        let latency_ms = started.elapsed().as_millis() as u64;
        {
            let mut totals = super::current(totals);
            totals.model_calls += 1;
            match reply.cost {
                Some(cost) => {
                    totals.cost += cost;
                    if let Some(spawn) = self.subagents {
                        spawn.add_cost(cost);
                    }
                }
                None => totals.cost_known = false,
            }
            add_usage(&mut totals.usage, &reply.usage);
        }
        let response = ModelResponse {
            turn,
            purpose,
            text: self.recorder.log.text(&reply.message.content)?,
            tool_calls: reply
                .message
                .tool_calls
                .iter()
                .map(|call| LoggedCall {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                })
                .collect(),
            usage: logged_usage(&reply.usage),
            cost: reply.cost,
            latency_ms,
            raw: self.recorder.log.json_blob(&reply.raw)?,
        };
        self.recorder
            .log
            .record(Event::ModelResponse(response))
            .await?;
        Ok(reply)
    }
}

impl Agent<'_> {
    /// Sends `request` inside the model call's span, and counts the call in the metrics.
    async fn send_observed(
        &self,
        request: &harness_models::Request,
        turn: u32,
        purpose: Purpose,
    ) -> Result<ModelReply, harness_models::ModelError> {
        let started = Instant::now();
        let model = harness_telemetry::ModelId::from_description(&self.model.describe());
        let span = tracing::info_span!(
            "model_call",
            otel.name = %format_args!("model {}", model.model),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            gen_ai.system = %model.provider,
            gen_ai.request.model = %model.model,
            turn,
            purpose = ?purpose,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            cost_usd = tracing::field::Empty,
        );
        let sent = self.model.send(request).instrument(span.clone()).await;
        let metrics = harness_telemetry::metrics();
        let reply = match sent {
            Ok(reply) => reply,
            Err(err) => {
                metrics.model_call(&model, started.elapsed(), None);
                span.record("otel.status_code", "ERROR");
                return Err(err);
            }
        };
        metrics.model_call(
            &model,
            started.elapsed(),
            Some((&reply.usage.by_kind(), reply.cost)),
        );
        let usage = &reply.usage;
        span.record("gen_ai.usage.input_tokens", usage.input_tokens as i64);
        span.record("gen_ai.usage.output_tokens", usage.output_tokens as i64);
        if let Some(cost) = reply.cost {
            span.record("cost_usd", cost);
        }
        Ok(reply)
    }
}

fn logged_usage(usage: &Usage) -> LoggedUsage {
    LoggedUsage {
        input_tokens: usage.input_tokens,
        cached_input_tokens: usage.cached_input_tokens,
        cache_write_tokens: usage.cache_write_tokens,
        output_tokens: usage.output_tokens,
    }
}

fn add_usage(total: &mut LoggedUsage, usage: &Usage) {
    total.input_tokens += usage.input_tokens;
    total.cached_input_tokens += usage.cached_input_tokens;
    total.cache_write_tokens += usage.cache_write_tokens;
    total.output_tokens += usage.output_tokens;
}
