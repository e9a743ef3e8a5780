//! Logging and tracing for both programs: a stderr log (text or JSON, levels from `RUST_LOG`)
//! and, when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) is set, the
//! program's spans exported over OTLP/HTTP (protobuf) to that collector.
//!
//! One crate sets this up for both programs so that the exporter's HTTP client is chosen in one
//! place, and both speak the same W3C trace context: the controller [`inject`]s `traceparent`
//! into each request to a sandbox, the sandbox-server [`extract`]s it, and a trace then holds
//! the spans of both processes.
//!
//! Telemetry never fails a program: a collector that is down or a bad variable is logged once
//! and the program runs without export.

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// The variables that turn export on (the OpenTelemetry specification's names).
pub const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

/// Which spans are exported, in `RUST_LOG`'s syntax; `info` when unset. Separate from the
/// log's filter, so a quiet log (`RUST_LOG=warn`) still exports every span.
pub const SPAN_FILTER_VARIABLE: &str = "OTEL_TRACING_FILTER";

/// How the log is set up.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// `service.name` unless `OTEL_SERVICE_NAME` says otherwise.
    pub service: &'static str,
    /// The program's version, as `service.version`.
    pub version: &'static str,
    /// JSON lines instead of text.
    pub json: bool,
    /// The log's level when `RUST_LOG` is unset.
    pub default_level: &'static str,
    /// Colour codes in the text log.
    pub ansi: bool,
}

/// The installed telemetry; [`Telemetry::shutdown`] sends the spans still queued.
#[derive(Debug)]
#[must_use = "call shutdown() before the program ends, or the last spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// Set once spans are exported: [`inject`] is a no-op until then.
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process exports spans (and so propagates its trace context).
pub fn active() -> bool {
    EXPORTING.load(std::sync::atomic::Ordering::Relaxed)
}

/// This process's `OTEL_*` variables as `NAME=value`, to hand to a sandbox-server started in a
/// container, so that it exports to the same collector (the address must be one the
/// container reaches).
pub fn forwarded_environment() -> Vec<String> {
    std::env::vars()
        .filter(|(name, _)| forwarded_variable(name))
        .map(|(name, value)| format!("{name}={value}"))
        .collect()
}

/// Whether a sandbox-server this process starts (in a container, or on the host) gets this
/// variable: the `OTEL_*` settings but the exporter's headers (`OTEL_EXPORTER_OTLP_HEADERS`,
/// `…_TRACES_HEADERS`), which carry the collector's credentials: they are the operator's, and
/// a task's container (its entrypoint, its verifier) or a command that reads its server's
/// environment would see them.
pub fn forwarded_variable(name: &str) -> bool {
    name.starts_with("OTEL_") && !name.contains("HEADERS")
}

/// Whether an OTLP endpoint is configured.
pub fn export_configured() -> bool {
    ENDPOINT_VARIABLES
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()))
}

/// Installs the global subscriber: the stderr log, and the OTLP exporter when an endpoint is
/// configured. A second call (tests) leaves the first in place.
pub fn init(options: Options) -> Telemetry {
    let (provider, failure) = if export_configured() {
        match provider(options) {
            Ok(provider) => (Some(provider), None),
            Err(why) => (None, Some(why)),
        }
    } else {
        (None, None)
    };
    let log_filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(options.default_level));
    let log = tracing_subscriber::fmt::layer()
        .with_ansi(options.ansi)
        .with_writer(std::io::stderr);
    let log = if options.json {
        log.json().with_filter(log_filter).boxed()
    } else {
        log.with_filter(log_filter).boxed()
    };
    let spans = provider.as_ref().map(|provider| {
        let filter = EnvFilter::try_from_env(SPAN_FILTER_VARIABLE)
            .unwrap_or_else(|_| EnvFilter::new("info"));
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(options.service))
            .with_filter(filter)
    });
    let installed = tracing_subscriber::registry()
        .with(log)
        .with(spans)
        .try_init()
        .is_ok();
    if let Some(why) = failure {
        tracing::warn!(cause = %why, "OpenTelemetry export is off");
    } else if installed && provider.is_some() {
        tracing::debug!("exporting spans over OTLP/HTTP");
    }
    Telemetry { provider }
}

/// The exporter and provider for the configured endpoint (read by the exporter itself, with
/// the other standard variables: headers, timeout, compression, batch sizes, sampler).
fn provider(options: Options) -> Result<SdkTracerProvider, String> {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|err| err.to_string())?;
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none_or(|v| v.is_empty()) {
        resource = resource.with_service_name(options.service);
    }
    let resource = resource
        .with_attribute(KeyValue::new("service.version", options.version))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    EXPORTING.store(true, std::sync::atomic::Ordering::Relaxed);
    Ok(provider)
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Sends the queued spans and stops the exporter (bounded by the exporter's timeout). Call
    /// it once the work is done, off the async worker threads; a failure is only logged.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(err) = provider.shutdown()
        {
            tracing::warn!(cause = %err, "could not send the last spans");
        }
    }
}

/// Writes `span`'s trace context into `headers` as W3C `traceparent`/`tracestate`. Nothing is
/// written when export is off (the span has no trace id).
pub fn inject(span: &tracing::Span, headers: &mut http::HeaderMap) {
    if !active() {
        return;
    }
    let context = span.context();
    TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
}

/// Renames a span that has already started (recording `otel.name` only names a span that has
/// not): a server span is named after its route once the route is known.
pub fn rename(span: &tracing::Span, name: String) {
    if active() {
        use opentelemetry::trace::TraceContextExt as _;
        span.context().span().update_name(name);
    }
}

/// The trace context a request carries, if any.
pub fn extract(headers: &http::HeaderMap) -> Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

/// Makes `span` a child of the trace context in `headers`, when they carry one. Call it before
/// the span is first entered.
pub fn continue_trace(span: &tracing::Span, headers: &http::HeaderMap) {
    if active() && headers.contains_key("traceparent") {
        let _ = span.set_parent(extract(headers));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips_through_headers() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            http::HeaderValue::from_static(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
        );
        let context = extract(&headers);
        let mut out = http::HeaderMap::new();
        TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(&mut out));
        assert_eq!(out.get("traceparent"), headers.get("traceparent"));
    }

    #[test]
    fn the_exporters_headers_are_not_forwarded() {
        assert!(forwarded_variable("OTEL_EXPORTER_OTLP_ENDPOINT"));
        assert!(forwarded_variable("OTEL_SERVICE_NAME"));
        for name in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OPENAI_API_KEY",
        ] {
            assert!(!forwarded_variable(name), "{name}");
        }
    }

    #[test]
    fn without_a_subscriber_nothing_is_injected() {
        let mut headers = http::HeaderMap::new();
        inject(&tracing::Span::none(), &mut headers);
        assert!(headers.get("traceparent").is_none());
    }
}
