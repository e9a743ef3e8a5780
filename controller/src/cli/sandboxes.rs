//! `harness sandboxes prune`: remove the containers a killed harness left; `harness sandboxes
//! token`: mint, list and revoke a remote sandbox's scoped tokens.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;

use anyhow::Context as _;
use runtime::exit_code;
use runtime::sandbox::{SandboxClient, docker};
use sandbox_protocol::{Scope, TokenRequest};

use super::{SandboxesCommand, TokenCommand, TokenSandbox};

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
    let token = runtime::session::sandbox::read_token(&sandbox.sandbox_token_file)?;
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
