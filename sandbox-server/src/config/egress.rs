//! `sandbox-server egress-proxy`'s flags.

use std::net::SocketAddr;

/// The flags of `sandbox-server egress-proxy`.
#[derive(Debug, Clone, clap::Args)]
pub struct EgressArgs {
    /// Where clients connect (their `HTTP_PROXY` / `HTTPS_PROXY`).
    #[arg(long, default_value = "0.0.0.0:3128")]
    pub listen: SocketAddr,
    /// The control port: `PUT /policy`, `GET /decisions`, `GET /healthz`.
    #[arg(long, default_value = "0.0.0.0:3129")]
    pub control: SocketAddr,
    /// The environment variable holding the control token (the proxy starts no process that
    /// could read it).
    #[arg(long, default_value = "HARNESS_EGRESS_TOKEN")]
    pub token_env: String,
    /// Connections served at once; more wait.
    #[arg(long, default_value_t = 256)]
    pub max_connections: usize,
    /// Accept connections (on both ports) only from these networks, `ADDR/BITS`, repeatable:
    /// the task's own network, so that no container of another network the proxy is on (a
    /// shared `bridge`) can use it. None: from anywhere.
    #[arg(long, value_name = "CIDR")]
    pub allow_from: Vec<String>,
}
