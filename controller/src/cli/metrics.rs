//! `--metrics-listen` and `--metrics-linger` of `run` and `batch`.

use anyhow::Context as _;

/// Prometheus metrics while the work goes.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct MetricsArgs {
    /// Serve `GET /metrics` (Prometheus text format) on this address while the work goes:
    /// tasks by state and outcome, attempts, model calls, tokens and cost by provider and
    /// model, rate-gate waits, 429s, sandbox start latency, warm-pool hits, tool calls and
    /// policy verdicts. Port 0 picks one; the address is printed on stderr.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_listen: Option<std::net::SocketAddr>,
    /// With --metrics-listen: keep serving this many seconds after the work ends, so that a
    /// last scrape sees the final counts (Ctrl-C ends the wait).
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 0,
        requires = "metrics_listen"
    )]
    pub(crate) metrics_linger: u64,
}

impl MetricsArgs {
    /// Starts the endpoint, when asked for.
    pub(crate) async fn start(&self) -> anyhow::Result<Option<harness_telemetry::MetricsServer>> {
        let Some(address) = self.metrics_listen else {
            return Ok(None);
        };
        let server = harness_telemetry::serve(address)
            .await
            .with_context(|| format!("--metrics-listen {address}: binding"))?;
        eprintln!("metrics: http://{}/metrics", server.address);
        Ok(Some(server))
    }

    /// After the work: serves on for --metrics-linger, or until Ctrl-C.
    pub(crate) async fn linger(&self, server: Option<harness_telemetry::MetricsServer>) {
        let Some(server) = server else {
            return;
        };
        if self.metrics_linger > 0 {
            eprintln!(
                "metrics: serving the final counts for {} s more (Ctrl-C to stop)",
                self.metrics_linger
            );
            tokio::select! {
                () = tokio::time::sleep(std::time::Duration::from_secs(self.metrics_linger)) => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        drop(server);
    }
}
