//! The containment commands get, from the flags; and the server's own files kept out of
//! their reach.

use std::path::{Path, PathBuf};

use super::{ConfigError, Network, ServeArgs};
use crate::process::confine::{ConfineRequest, Rlimits};

impl ServeArgs {
    pub(super) fn confine_request(&self) -> Result<ConfineRequest, ConfigError> {
        Ok(ConfineRequest {
            rlimits: Rlimits {
                cpu_secs: self.limit_cpu_secs,
                memory_bytes: self.limit_memory,
                file_size_bytes: self.limit_file_size,
                processes: self.limit_processes,
                open_files: self.limit_open_files,
            },
            landlock: !self.no_landlock,
            writable: self.writable.clone(),
            hidden: self
                .hidden
                .iter()
                .cloned()
                .chain(self.token_file.clone())
                .chain(self.token_store.clone())
                .chain(self.audit_log.clone())
                .chain(self.tls.tls_key.clone())
                .chain(self.tls.client_ca.clone())
                .chain(self.rotated_audit_files())
                .collect(),
            read_only: self.read_only.clone(),
            hide_homes: !(self.show_homes || self.files_anywhere),
            // A task's container is the boundary: its package manager installs set-id programs
            // into the image's own files, which no host user runs.
            refuse_set_id: !self.files_anywhere,
            network_none: self.network == Network::None,
            network_detail: match self.network {
                Network::Container => Some(format!(
                    "the container's network is the boundary: {}",
                    self.network_detail
                        .as_deref()
                        .unwrap_or("as its engine set it up")
                )),
                _ => None,
            },
            run_as: self.run_as()?,
            env_allow: self.env_allow.clone(),
            namespaces: !self.no_pid_namespace,
        })
    }

    /// The server's own files (the token file and store, the audit log, the TLS key,
    /// certificate and client CA) must lie outside every folder commands write: a command could
    /// replace a client CA, empty the audit log or read a token otherwise.
    pub(super) fn check_own_files(&self, workspace: &Path) -> Result<(), ConfigError> {
        let mut writable: Vec<(String, PathBuf)> =
            vec![("the workspace".to_owned(), workspace.to_owned())];
        writable.extend(
            self.writable
                .iter()
                .filter_map(|path| path.canonicalize().ok())
                .map(|path| (format!("--writable {}", path.display()), path)),
        );
        let own = [
            ("token-file", &self.token_file),
            ("token-store", &self.token_store),
            ("audit-log", &self.audit_log),
            ("tls-cert", &self.tls.tls_cert),
            ("tls-key", &self.tls.tls_key),
            ("client-ca", &self.tls.client_ca),
        ];
        for (flag, path) in own {
            let Some(path) = path else { continue };
            let resolved = resolve(path);
            if let Some((name, _)) = writable.iter().find(|(_, w)| resolved.starts_with(w)) {
                return Err(ConfigError::Range {
                    flag,
                    why: format!(
                        "{} lies beneath {name}, where commands write: one could replace or read it; keep the server's own files outside it",
                        path.display()
                    ),
                });
            }
        }
        Ok(())
    }

    /// The audit log's rotated files that exist now (`FILE.1`, …), hidden like the log.
    pub(super) fn rotated_audit_files(&self) -> Vec<PathBuf> {
        let Some(path) = &self.audit_log else {
            return Vec::new();
        };
        (1..=self.audit_log_keep)
            .map(|n| {
                let mut name = path.clone().into_os_string();
                name.push(format!(".{n}"));
                PathBuf::from(name)
            })
            .filter(|p| p.exists())
            .collect()
    }
}

/// Where a path is, its links followed; for a file not made yet, its folder's place and its
/// name.
fn resolve(path: &Path) -> PathBuf {
    if let Ok(found) = path.canonicalize() {
        return found;
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    match (absolute.parent(), absolute.file_name()) {
        (Some(parent), Some(name)) => parent
            .canonicalize()
            .map_or_else(|_| absolute.clone(), |p| p.join(name)),
        _ => absolute,
    }
}
