//! `harness sandboxes prune`: remove the containers a killed harness left; `harness sandboxes
//! token`: mint, list and revoke a remote sandbox's scoped tokens.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;

use crate::exit_code;
use anyhow::Context as _;
use clap::Subcommand;
use harness_runtime::sandbox::{SandboxClient, docker};
use sandbox_protocol::{Scope, TokenRequest};

use super::{SandboxTlsArgs, SandboxesCommand};

/// The sandbox a `harness sandboxes token` command talks to.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct TokenSandbox {
    /// The sandbox-server's URL (`https://…`, or `http://` on loopback).
    #[arg(long, value_name = "URL")]
    pub(crate) sandbox: String,
    /// The token the command authenticates with, in a file (it needs the `admin` scope).
    #[arg(long, value_name = "FILE")]
    pub(crate) sandbox_token_file: PathBuf,
    #[command(flatten)]
    pub(crate) sandbox_tls: SandboxTlsArgs,
}

#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Mint a token with SCOPES (of read, write, run, admin, observe) for --ttl; prints its
    /// id, scopes and expiry, and the token itself unless --out takes it.
    Mint {
        #[command(flatten)]
        sandbox: TokenSandbox,
        /// The scopes, comma-separated: `read` for a viewer, `read,write,run` for an agent.
        #[arg(long, value_delimiter = ',', required = true, value_name = "SCOPES")]
        scopes: Vec<String>,
        /// How long it lives (e.g. `30m`, `8h`; at most a year).
        #[arg(long, value_name = "DURATION")]
        ttl: humantime::Duration,
        /// What it is for, in the list and the audit log.
        #[arg(long, default_value = "harness")]
        name: String,
        /// Write the token to this new file (mode 0600, for --sandbox-token-file) instead of
        /// printing it.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// The tokens minted and not revoked, as JSON (never their secrets).
    List {
        #[command(flatten)]
        sandbox: TokenSandbox,
    },
    /// Revoke token ID: its next request is refused.
    Revoke {
        #[command(flatten)]
        sandbox: TokenSandbox,
        id: String,
    },
}

pub(crate) async fn run(command: SandboxesCommand) -> anyhow::Result<i32> {
    match command {
        SandboxesCommand::Prune { all } => prune(all).await,
        SandboxesCommand::Token(command) => token(*command).await,
    }
}

async fn prune(all: bool) -> anyhow::Result<i32> {
    let (removed, kept) = docker::prune(all).await?;
    for container in &removed {
        println!(
            "removed {} (session {}): {}",
            container.id, container.session, container.reason
        );
    }
    for container in &kept {
        eprintln!(
            "kept {} (session {}): {}",
            container.id, container.session, container.reason
        );
    }
    eprintln!("{} removed, {} kept", removed.len(), kept.len());
    Ok(exit_code::COMPLETED)
}

fn client(sandbox: &TokenSandbox) -> anyhow::Result<SandboxClient> {
    let token = harness_runtime::session::sandbox::read_token(&sandbox.sandbox_token_file)?;
    Ok(SandboxClient::with_tls(
        &sandbox.sandbox,
        Some(token),
        &sandbox.sandbox_tls.client_tls(),
    )?)
}

/// `read,run` as scopes, naming one that is not.
fn scopes(names: &[String]) -> anyhow::Result<Vec<Scope>> {
    names
        .iter()
        .map(|name| {
            Scope::parse(name.trim()).with_context(|| {
                let known: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
                format!(
                    "--scopes: `{name}` is not a scope; the scopes are {}",
                    known.join(", ")
                )
            })
        })
        .collect()
}

async fn token(command: TokenCommand) -> anyhow::Result<i32> {
    match command {
        TokenCommand::Mint {
            sandbox,
            scopes: names,
            ttl,
            name,
            out,
        } => {
            let request = TokenRequest {
                name,
                scopes: scopes(&names)?,
                ttl_secs: ttl.as_secs().max(1),
            };
            // The file first: a token that could not be kept is never minted.
            let file = match &out {
                Some(path) => Some(
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(path)
                        .with_context(|| format!("--out {}", path.display()))?,
                ),
                None => None,
            };
            let minted = match client(&sandbox)?.mint_token(&request).await {
                Ok(minted) => minted,
                Err(err) => {
                    if let Some(path) = &out {
                        let _ = std::fs::remove_file(path);
                    }
                    return Err(err).context(format!("minting a token at {}", sandbox.sandbox));
                }
            };
            match (file, &out) {
                (Some(mut file), Some(path)) => {
                    writeln!(file, "{}", minted.token)
                        .with_context(|| format!("writing {}", path.display()))?;
                    println!("{}", serde_json::to_string_pretty(&minted.info)?);
                    eprintln!("the token is in {}", path.display());
                }
                _ => println!("{}", serde_json::to_string_pretty(&minted)?),
            }
        }
        TokenCommand::List { sandbox } => {
            let list = client(&sandbox)?
                .list_tokens()
                .await
                .with_context(|| format!("listing the tokens of {}", sandbox.sandbox))?;
            println!("{}", serde_json::to_string_pretty(&list)?);
        }
        TokenCommand::Revoke { sandbox, id } => {
            let revoked = client(&sandbox)?
                .revoke_token(&id)
                .await
                .with_context(|| format!("revoking {id} at {}", sandbox.sandbox))?;
            println!("{}", serde_json::to_string_pretty(&revoked)?);
        }
    }
    Ok(exit_code::COMPLETED)
}
