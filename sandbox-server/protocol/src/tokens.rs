//! Scoped, expiring tokens: what each may do, and the requests that mint, list and revoke them.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The longest lifetime a token may be given: a year (the schema of `ttl_secs` says the same
/// number; a test keeps them equal).
pub const MAX_TTL_SECS: u64 = 365 * 24 * 3600;

/// What a token may do. The server's own token (`--token-file`) holds every scope; a minted
/// token holds those it was given, and may mint only tokens with scopes it holds itself.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Read the workspace: `read_file`, dirs, files, changes, snapshots, blobs, archives,
    /// the fingerprint, artifacts.
    Read,
    /// Change the workspace: `write_file`, `search_replace`, file and archive uploads (a
    /// restore is an archive upload).
    Write,
    /// Run commands: `bash`, `exec`, `shell`, `write_stdin`, processes and shells (their output
    /// and terminal included), and any tool plugin.
    Run,
    /// Administer the server: reset the sandbox, mint, list and revoke tokens.
    Admin,
    /// Read `GET /metrics`.
    Observe,
}

crate::serde_names!(Scope);

impl Scope {
    /// Every scope, in their order on the wire.
    pub const ALL: [Scope; 5] = [
        Scope::Read,
        Scope::Write,
        Scope::Run,
        Scope::Admin,
        Scope::Observe,
    ];

    /// A scope by its wire name.
    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.as_str() == name)
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of `POST /v1/tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "viewer", "scopes": ["read"], "ttl_secs": 3600}))]
pub struct TokenRequest {
    /// What the token is for, for people reading the list and the audit log (1 to 64
    /// characters: letters, digits, `-`, `_`, `.`, `:`, `@`).
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9._:@-]{1,64}$")]
    pub name: String,
    /// One or more scopes; each must be held by the token that mints it.
    #[schema(min_items = 1)]
    pub scopes: Vec<Scope>,
    /// Seconds until the token expires: 1 to 31,536,000 (a year), and never past the expiry
    /// of the token that mints it.
    #[schema(minimum = 1, maximum = 31_536_000)]
    #[serde(deserialize_with = "crate::number::u64")]
    pub ttl_secs: u64,
}

/// A minted token as the server lists it: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenInfo {
    /// `tok_` and 16 hexadecimal digits; the audit log names the token by it.
    pub id: String,
    pub name: String,
    pub scopes: Vec<Scope>,
    /// The id of the token that minted it, or `root`.
    pub minted_by: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339; from then on the token is refused with 401.
    pub expires_at: String,
    /// Whether `expires_at` has passed.
    pub expired: bool,
}

/// The answer of `POST /v1/tokens`: the token itself, shown this once (the server keeps only
/// its SHA-256), with what the list shows of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MintedToken {
    /// The secret, for `Authorization: Bearer …`: `sbt_`, the id's 16 digits, `_`, and 64
    /// random hexadecimal digits.
    pub token: String,
    #[serde(flatten)]
    pub info: TokenInfo,
}

/// The answer of `GET /v1/tokens`: the tokens that are neither revoked nor long expired
/// (an expired token is listed for a day after its expiry), newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenList {
    pub tokens: Vec<TokenInfo>,
}

/// The answer of `DELETE /v1/tokens/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenRevoked {
    pub id: String,
    /// Always true: the next request with the token is refused.
    pub revoked: bool,
    /// The tokens it minted, and those they minted, revoked with it: a token is valid only
    /// while the one that minted it is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub with_it: Vec<String>,
}
