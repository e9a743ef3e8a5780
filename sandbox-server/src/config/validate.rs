//! The flags' validated form: [`ServeArgs::validate`] checks each flag, opens what the server
//! keeps open (the token store, the audit log) and builds the [`Config`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::{Config, ConfigError, ServeArgs, TlsArgs, known, parse_user};
use crate::sandbox::Registry;

impl ServeArgs {
    /// As `validate`, for a server that listens on no address (`mcp-stdio`): no token needed,
    /// and the flags of an HTTP address refused by name rather than ignored.
    pub fn validate_for_stdio(mut self) -> Result<Config, ConfigError> {
        let http_only = [
            ("tls-cert", self.tls.tls_cert.is_some()),
            ("tls-key", self.tls.tls_key.is_some()),
            ("client-ca", self.tls.client_ca.is_some()),
            ("audit-log", self.audit_log.is_some()),
            ("token-store", self.token_store.is_some()),
        ];
        if let Some((flag, _)) = http_only.iter().find(|(_, given)| *given) {
            return Err(ConfigError::Range {
                flag,
                why: "mcp-stdio serves stdin and stdout, not an HTTP address: leave it out (or its SANDBOX_ variable)".to_owned(),
            });
        }
        self.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        self.metrics_listen = None;
        self.tls = TlsArgs::default();
        self.validate()
    }

    pub fn validate(self) -> Result<Config, ConfigError> {
        let workspace = self.workspace()?;
        self.check_own_files(&workspace)?;
        let token = self.token()?;
        if token.is_none() && !self.listen.ip().is_loopback() {
            return Err(ConfigError::NoToken(self.listen));
        }
        let registry = self.registry()?;
        self.check_ranges()?;
        let confine = self.confine_request()?;
        Ok(Config {
            workspace,
            files_anywhere: self.files_anywhere,
            entrypoint_process: self.entrypoint_process()?,
            listen: self.listen,
            metrics_listen: self.metrics_listen,
            tls: self.tls.files()?,
            tokens: Arc::new(match &self.token_store {
                Some(store) => crate::tokens::Tokens::open(token, store)
                    .map_err(|err| ConfigError::TokenStore(err.to_string()))?,
                None => crate::tokens::Tokens::new(token),
            }),
            audit: self.audit()?,
            registry,
            output_limit: self.output_limit,
            artifact_cap: self.artifact_cap,
            artifact_retention: self.artifact_retention,
            state_dir: self.state_dir,
            max_body_bytes: self.max_body_bytes,
            max_inflight_body_bytes: self.max_inflight_body_bytes,
            archive_max_bytes: self.archive_max_bytes,
            archive_max_entries: self.archive_max_entries,
            scan_max_entries: self.scan_max_entries,
            max_concurrent_calls: self.max_concurrent_calls,
            max_followers: self.max_followers,
            process_buffer: self.process_buffer,
            max_processes: self.max_processes,
            worker_threads: self.worker_threads,
            snapshot_ignore: self.snapshot_ignore,
            watch: self.watch,
            known_files: match &self.known_files {
                Some(path) => known::read(path)?,
                None => Vec::new(),
            },
            blob_max_file_bytes: self.blob_max_file_bytes,
            confine,
            require_protections: self.require_protections,
            kill_grace: Duration::from_millis(self.kill_grace_ms),
            idempotency_ttl: Duration::from_secs(self.idempotency_ttl_secs),
            durable_writes: self.durable_writes,
            shutdown_grace: Duration::from_secs(self.shutdown_grace_secs),
        })
    }

    /// `--entrypoint-process`: a JSON array of one or more words.
    fn entrypoint_process(&self) -> Result<Option<Vec<String>>, ConfigError> {
        Ok(match &self.entrypoint_process {
            None => None,
            Some(text) => Some(
                serde_json::from_str::<Vec<String>>(text)
                    .ok()
                    .filter(|words| !words.is_empty())
                    .ok_or_else(|| ConfigError::Range {
                        flag: "entrypoint-process",
                        why: format!("expected a JSON array of one or more strings, got `{text}`"),
                    })?,
            ),
        })
    }

    fn workspace(&self) -> Result<PathBuf, ConfigError> {
        let workspace_error = |why: String| ConfigError::Workspace {
            path: self.workspace.clone(),
            why,
        };
        let workspace = self
            .workspace
            .canonicalize()
            .map_err(|err| workspace_error(err.to_string()))?;
        if !workspace.is_dir() {
            return Err(workspace_error("not a directory".to_owned()));
        }
        Ok(workspace)
    }

    fn registry(&self) -> Result<Registry, ConfigError> {
        let Some(names) = &self.tools else {
            return Ok(crate::sandbox::tools::default_tools());
        };
        let names: Vec<String> = names
            .iter()
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty())
            .collect();
        if names.is_empty() {
            return Err(ConfigError::Tools("name at least one tool".to_owned()));
        }
        crate::sandbox::tools::builtin()
            .select(&names)
            .map_err(ConfigError::Tools)
    }

    fn check_ranges(&self) -> Result<(), ConfigError> {
        let positive = |flag: &'static str, value: u64| {
            if value == 0 {
                Err(ConfigError::Range {
                    flag,
                    why: "must be at least 1".to_owned(),
                })
            } else {
                Ok(())
            }
        };
        positive("max-concurrent-calls", self.max_concurrent_calls as u64)?;
        positive("max-followers", self.max_followers as u64)?;
        positive("max-processes", self.max_processes as u64)?;
        positive("process-buffer", self.process_buffer)?;
        positive("max-body-bytes", self.max_body_bytes)?;
        positive("worker-threads", self.worker_threads as u64)?;
        positive("artifact-cap", self.artifact_cap)?;
        positive("archive-max-bytes", self.archive_max_bytes)?;
        positive("archive-max-entries", self.archive_max_entries)?;
        positive("scan-max-entries", self.scan_max_entries)?;
        if self.max_inflight_body_bytes < self.max_body_bytes {
            return Err(ConfigError::Range {
                flag: "max-inflight-body-bytes",
                why: format!(
                    "must be at least --max-body-bytes ({}), got {}",
                    self.max_body_bytes, self.max_inflight_body_bytes
                ),
            });
        }
        if let Some(relative) = self
            .watch
            .iter()
            .find(|path| !std::path::Path::new(path).is_absolute())
        {
            return Err(ConfigError::Range {
                flag: "watch",
                why: format!("`{relative}` is not an absolute path"),
            });
        }
        if self.output_limit < 1000 {
            return Err(ConfigError::Range {
                flag: "output-limit",
                why: format!("must be at least 1000, got {}", self.output_limit),
            });
        }
        Ok(())
    }

    pub(super) fn run_as(&self) -> Result<Option<(u32, u32)>, ConfigError> {
        self.run_as.as_deref().map(parse_user).transpose()
    }
}
