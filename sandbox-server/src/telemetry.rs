//! Logging and tracing: text for people or JSON for log collectors on stderr (levels from
//! `RUST_LOG`), and spans exported over OTLP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (see the
//! `otel` crate).

use crate::config::LogFormat;

/// Installs the log and, when configured, the span exporter; call `shutdown` on what it
/// returns once the server has stopped.
pub fn init(format: LogFormat) -> harness_otel::Telemetry {
    harness_otel::init(harness_otel::Options {
        service: "sandbox-server",
        version: env!("CARGO_PKG_VERSION"),
        json: matches!(format, LogFormat::Json),
        default_level: "info",
        ansi: colour_on_stderr(),
    })
}

/// Colour only on a terminal, and never with `NO_COLOR` set (<https://no-color.org>): a log
/// redirected to a file or a pipe holds no escape codes.
pub fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
