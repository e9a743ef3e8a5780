//! Who may call the server, and the record of who did: the root token (`--token-file`) and
//! the audit log (`--audit-log`), read and opened from the flags.

use std::fmt;

use super::{ConfigError, ServeArgs};

/// A bearer token; its `Debug` output is redacted.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    pub fn new(secret: String) -> Token {
        Token(secret)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl ServeArgs {
    pub(super) fn token(&self) -> Result<Option<Token>, ConfigError> {
        let Some(path) = &self.token_file else {
            return Ok(None);
        };
        let token_error = |why: String| ConfigError::TokenFile {
            path: path.clone(),
            why,
        };
        let text = std::fs::read_to_string(path).map_err(|err| token_error(err.to_string()))?;
        if self.forget_token_file {
            std::fs::remove_file(path)
                .map_err(|err| token_error(format!("forgetting it: {err}")))?;
        }
        let token = text.trim();
        if token.is_empty() {
            return Err(token_error("the file is empty".to_owned()));
        }
        if token.len() < 16 {
            return Err(token_error(
                "the token is shorter than 16 characters".to_owned(),
            ));
        }
        Ok(Some(Token(token.to_owned())))
    }

    pub(super) fn audit(&self) -> Result<Option<crate::http::audit::AuditLog>, ConfigError> {
        let Some(path) = &self.audit_log else {
            return Ok(None);
        };
        if self.audit_log_max_bytes < 4096 {
            return Err(ConfigError::Range {
                flag: "audit-log-max-bytes",
                why: format!("must be at least 4KiB, got {}", self.audit_log_max_bytes),
            });
        }
        let file = crate::http::audit::AuditFile {
            path: path.clone(),
            max_bytes: self.audit_log_max_bytes,
            keep: self.audit_log_keep,
        };
        crate::http::audit::AuditLog::open(&file)
            .map(Some)
            .map_err(|err| ConfigError::Range {
                flag: "audit-log",
                why: format!("{}: {err}", path.display()),
            })
    }
}
