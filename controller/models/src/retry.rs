//! Sending a JSON request to a provider, with retries on 429, 5xx and broken connections.

use std::time::Duration;

use serde_json::Value;

use super::ModelError;
use super::gate::RateGate;

/// How often and how long to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// The first backoff; each retry doubles it, plus up to as much again of jitter.
    pub base_delay: Duration,
    /// No single wait is longer, `Retry-After` included.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 6,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    fn backoff(&self, retry_idx: u32) -> Duration {
        let exponential = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(retry_idx));
        let jitter = exponential.mul_f64(rand::random::<f64>());
        (exponential + jitter).min(self.max_delay)
    }
}

/// Posts `body` to `url` with `headers`; returns the JSON answer of the first 2xx.
pub(crate) async fn post_json(
    client: &reqwest::Client,
    provider: &'static str,
    url: &str,
    headers: &[(&str, &str)],
    body: &Value,
    policy: RetryPolicy,
    gate: Option<&RateGate>,
) -> Result<Value, ModelError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let pass = match gate {
            Some(gate) => Some(gate.pass().await),
            None => None,
        };
        let result = send_once(client, provider, url, headers, body).await;
        drop(pass);
        if let Err(ModelError::Status { status: 429, .. }) = &result {
            harness_telemetry::metrics().model_throttled(url);
        }
        match result {
            Ok(value) => return Ok(value),
            Err(err) if err.is_retryable() && attempt < policy.max_attempts => {
                let wait = match &err {
                    ModelError::Status {
                        retry_after: Some(after),
                        ..
                    } => *after,
                    _ => policy.backoff(attempt - 1),
                }
                .min(policy.max_delay);
                // A 429 slows every session on this endpoint, not only this one.
                if let (Some(gate), ModelError::Status { status: 429, .. }) = (gate, &err) {
                    gate.throttle(wait);
                }
                tracing::warn!(provider, attempt, wait_ms = wait.as_millis() as u64, cause = %err, "model request failed; retrying");
                tokio::time::sleep(wait).await;
            }
            Err(err) => return Err(err),
        }
    }
}

async fn send_once(
    client: &reqwest::Client,
    provider: &'static str,
    url: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> Result<Value, ModelError> {
    let mut request = client.post(url).json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let transport = |err: reqwest::Error| match refused_certificate(&err) {
        Some(message) => ModelError::Certificate { provider, message },
        None => ModelError::Transport {
            provider,
            message: describe(&err),
        },
    };
    let response = request.send().await.map_err(transport)?;
    let status = response.status();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
        .map(Duration::from_secs_f64);
    let text = response.text().await.map_err(transport)?;
    if !status.is_success() {
        return Err(ModelError::Status {
            provider,
            status: status.as_u16(),
            message: provider_message(&text),
            retry_after,
        });
    }
    serde_json::from_str(&text).map_err(|err| ModelError::BadResponse {
        provider,
        message: format!("not JSON ({err})"),
    })
}

/// The provider's own error message when the body has one (`{"error": {"message": …}}`).
fn provider_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|value| {
        value["error"]["message"]
            .as_str()
            .or_else(|| value["message"].as_str())
            .or_else(|| value["error"].as_str())
    });
    match message {
        Some(message) => message.to_owned(),
        None => body.chars().take(500).collect(),
    }
}

/// The peer's certificate refusal behind a request's failure, when that is what it was.
/// (rustls's error arrives inside `io::Error`s, whose `source` skips what they wrap: each
/// cause's wrapped errors are looked into too.)
pub fn refused_certificate(err: &reqwest::Error) -> Option<String> {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let mut candidate: Option<&(dyn std::error::Error + 'static)> = Some(cause);
        while let Some(error) = candidate {
            if let Some(tls) = error.downcast_ref::<rustls::Error>()
                && about_certificates(tls)
            {
                return Some(tls.to_string());
            }
            candidate = error
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .map(|inner| inner as &(dyn std::error::Error + 'static));
        }
        source = cause.source();
    }
    None
}

/// Ours refused theirs, or theirs refused ours (the alerts a peer sends about certificates).
fn about_certificates(error: &rustls::Error) -> bool {
    use rustls::AlertDescription as Alert;
    match error {
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => true,
        rustls::Error::AlertReceived(alert) => matches!(
            alert,
            Alert::CertificateRequired
                | Alert::BadCertificate
                | Alert::UnknownCA
                | Alert::CertificateUnknown
                | Alert::CertificateExpired
                | Alert::CertificateRevoked
                | Alert::UnsupportedCertificate
        ),
        _ => false,
    }
}

fn describe(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
