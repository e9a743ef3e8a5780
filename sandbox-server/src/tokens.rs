//! The server's credentials: the root token of `--token-file`, and the scoped, expiring tokens
//! minted with it, kept only as SHA-256 hashes (in memory, and in `--token-store FILE` when
//! given, so that a restart keeps them).
//!
//! A minted token reads `sbt_<16 hex digits of its id>_<64 random hex digits>`: the id finds
//! its entry at once, and the whole is compared with the stored hash in constant time. A
//! revoked token's id is kept (until its expiry) so that its refusal can say so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sandbox_protocol::{MintedToken, Scope, TokenInfo, TokenRequest};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::Token;

pub use sandbox_protocol::tokens::MAX_TTL_SECS;

/// The most tokens a server holds at once (an expired one counts for a day): a token with
/// `admin` cannot grow the server's memory and store without bound.
pub const MAX_TOKENS: usize = 10_000;

/// How long an expired token stays listed (and named as expired when presented).
const LISTED_AFTER_EXPIRY_SECS: u64 = 24 * 3600;

/// Who made a request, once its token is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The server has no token: every request is allowed (loopback only).
    Anyone,
    /// The root token: every scope.
    Root,
    /// A minted token.
    Minted {
        id: String,
        scopes: Vec<Scope>,
        expires: u64,
    },
}

impl Caller {
    pub fn holds(&self, scope: Scope) -> bool {
        match self {
            Caller::Anyone | Caller::Root => true,
            Caller::Minted { scopes, .. } => scopes.contains(&scope),
        }
    }

    /// The token's id as the audit log and the token list name it: `root`, a `tok_` id, or
    /// none without a token.
    pub fn token_id(&self) -> Option<&str> {
        match self {
            Caller::Anyone => None,
            Caller::Root => Some("root"),
            Caller::Minted { id, .. } => Some(id),
        }
    }
}

/// Why a request's token was refused (401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("missing `Authorization: Bearer <token>` header")]
    Missing,
    #[error("the Authorization header must be `Bearer <token>`")]
    NotBearer,
    #[error("wrong token")]
    Wrong,
    #[error("token {id} expired at {at}")]
    Expired { id: String, at: String },
    #[error("token {id} was revoked")]
    Revoked { id: String },
}

/// Why a token could not be minted or revoked.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The request does not make sense; the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// The server runs without a token.
    #[error(
        "this server has no token (no --token-file): every request is already allowed, and there is nothing to mint tokens from"
    )]
    NoRoot,
    #[error("no token {0}")]
    Unknown(String),
    /// The store could not be written; nothing changed.
    #[error("--token-store {path}: {why}")]
    Store { path: PathBuf, why: String },
}

/// A minted token as kept: its hash, never its secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    id: String,
    name: String,
    scopes: Vec<Scope>,
    minted_by: String,
    created: u64,
    expires: u64,
    sha256: String,
}

/// A revoked token's id, kept until it would have expired.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RevokedId {
    id: String,
    expires: u64,
}

/// The `--token-store` file.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreFile {
    version: u32,
    tokens: Vec<Stored>,
    revoked: Vec<RevokedId>,
}

const STORE_VERSION: u32 = 1;

#[derive(Debug, Default)]
struct Minted {
    tokens: BTreeMap<String, Stored>,
    revoked: BTreeMap<String, u64>,
}

/// The root token and the minted ones.
#[derive(Debug)]
pub struct Tokens {
    root: Option<Token>,
    minted: Mutex<Minted>,
    store: Option<PathBuf>,
    /// Bumped at each revocation, for the streams of the token revoked to end.
    revocations: tokio::sync::watch::Sender<u64>,
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn at(unix: u64) -> String {
    crate::time::rfc3339(unix as f64)
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `tok_` and 16 hex digits, from a presented `sbt_…` token (the audit log names the id a
/// refused token claims).
pub fn claimed_id(presented: &[u8]) -> Option<String> {
    let rest = presented.strip_prefix(b"sbt_")?;
    let (digits, secret) = (rest.get(..16)?, rest.get(16..)?);
    if !digits.iter().all(u8::is_ascii_hexdigit) || secret.first() != Some(&b'_') {
        return None;
    }
    Some(format!("tok_{}", std::str::from_utf8(digits).ok()?))
}

/// `tok_` and 16 lowercase hex digits.
pub fn is_token_id(id: &str) -> bool {
    id.strip_prefix("tok_").is_some_and(|digits| {
        digits.len() == 16
            && digits
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:@".contains(c))
}

impl Tokens {
    /// The root token alone, minted tokens kept in memory.
    pub fn new(root: Option<Token>) -> Tokens {
        Tokens {
            root,
            minted: Mutex::default(),
            store: None,
            revocations: tokio::sync::watch::Sender::new(0),
        }
    }

    /// With `--token-store`: the tokens the file holds (none when it does not exist yet). A
    /// file that cannot be read or parsed stops the start; it is never overwritten.
    pub fn open(root: Option<Token>, store: &Path) -> Result<Tokens, TokenError> {
        let store_error = |why: String| TokenError::Store {
            path: store.to_path_buf(),
            why,
        };
        if root.is_none() {
            return Err(store_error(
                "needs --token-file: minted tokens are minted with the server's token".to_owned(),
            ));
        }
        let mut minted = Minted::default();
        match std::fs::read(store) {
            Ok(bytes) => {
                let file: StoreFile = serde_json::from_slice(&bytes).map_err(|err| {
                    store_error(format!(
                        "not a token store ({err}); fix or move the file, it is left as it is"
                    ))
                })?;
                if file.version != STORE_VERSION {
                    return Err(store_error(format!(
                        "version {} is not {STORE_VERSION}, the one this server reads",
                        file.version
                    )));
                }
                for token in file.tokens {
                    if !is_token_id(&token.id) {
                        return Err(store_error(format!("`{}` is not a token id", token.id)));
                    }
                    minted.tokens.insert(token.id.clone(), token);
                }
                minted.revoked = file
                    .revoked
                    .into_iter()
                    .map(|r| (r.id, r.expires))
                    .collect();
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(store_error(err.to_string())),
        }
        let tokens = Tokens {
            root,
            minted: Mutex::new(minted),
            store: Some(store.to_path_buf()),
            revocations: tokio::sync::watch::Sender::new(0),
        };
        // Written at once: the file exists (and is hidden from commands) before any is run.
        tokens.persist(&tokens.lock())?;
        Ok(tokens)
    }

    /// Whether the server has a token at all.
    pub fn required(&self) -> bool {
        self.root.is_some()
    }

    /// The store's path, to hide it from commands.
    pub fn store(&self) -> Option<&Path> {
        self.store.as_deref()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Minted> {
        self.minted.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Who presents the `Authorization` header `header`.
    pub fn authenticate(&self, header: Option<&[u8]>) -> Result<Caller, Refused> {
        let Some(root) = &self.root else {
            return Ok(Caller::Anyone);
        };
        let presented = header
            .ok_or(Refused::Missing)?
            .strip_prefix(b"Bearer ")
            .ok_or(Refused::NotBearer)?;
        if bool::from(presented.ct_eq(root.expose().as_bytes())) {
            return Ok(Caller::Root);
        }
        let id = claimed_id(presented).ok_or(Refused::Wrong)?;
        let hash = sha256_hex(presented);
        let minted = self.lock();
        if let Some(token) = minted.tokens.get(&id)
            && bool::from(hash.as_bytes().ct_eq(token.sha256.as_bytes()))
        {
            if now() >= token.expires {
                return Err(Refused::Expired {
                    id,
                    at: at(token.expires),
                });
            }
            return Ok(Caller::Minted {
                id,
                scopes: token.scopes.clone(),
                expires: token.expires,
            });
        }
        if minted.revoked.contains_key(&id) {
            return Err(Refused::Revoked { id });
        }
        Err(Refused::Wrong)
    }

    /// Mints a token for `request`, by `caller` (who must hold every scope asked for, and
    /// outlive the new token).
    pub fn mint(&self, caller: &Caller, request: &TokenRequest) -> Result<MintedToken, TokenError> {
        let minted_by = caller.token_id().ok_or(TokenError::NoRoot)?.to_owned();
        if !valid_name(&request.name) {
            return Err(TokenError::Invalid(format!(
                "name: must be 1 to 64 letters, digits or `-_.:@`, got {:?}",
                request.name
            )));
        }
        if request.scopes.is_empty() {
            return Err(TokenError::Invalid(
                "scopes: name at least one of read, write, run, admin, observe".to_owned(),
            ));
        }
        if let Some(scope) = request.scopes.iter().find(|s| !caller.holds(**s)) {
            return Err(TokenError::Invalid(format!(
                "scopes: `{scope}` is not held by the token minting it ({minted_by}); a token mints only scopes it holds"
            )));
        }
        if !(1..=MAX_TTL_SECS).contains(&request.ttl_secs) {
            return Err(TokenError::Invalid(format!(
                "ttl_secs: must be between 1 and {MAX_TTL_SECS}, got {}",
                request.ttl_secs
            )));
        }
        let created = now();
        let expires = created.saturating_add(request.ttl_secs);
        if let Caller::Minted { expires: own, .. } = caller
            && expires > *own
        {
            return Err(TokenError::Invalid(format!(
                "ttl_secs: the token would outlive the one minting it ({minted_by} expires at {}); ask for at most {} s",
                at(*own),
                own.saturating_sub(created)
            )));
        }
        let digits = format!("{:016x}", rand::random::<u64>());
        let secret = format!("sbt_{digits}_{}", hex::encode(rand::random::<[u8; 32]>()));
        let mut scopes = request.scopes.clone();
        scopes.sort();
        scopes.dedup();
        let stored = Stored {
            id: format!("tok_{digits}"),
            name: request.name.clone(),
            scopes,
            minted_by,
            created,
            expires,
            sha256: sha256_hex(secret.as_bytes()),
        };
        let info = info(&stored, created);
        let mut minted = self.lock();
        prune(&mut minted, created);
        // Checked under the lock that revocations take: a minter revoked since its request
        // passed the door mints nothing.
        if let Caller::Minted { id, .. } = caller
            && !minted.tokens.contains_key(id)
        {
            return Err(TokenError::Invalid(format!(
                "the token minting it ({id}) was revoked or has expired"
            )));
        }
        if minted.tokens.len() >= MAX_TOKENS {
            return Err(TokenError::Invalid(format!(
                "this server holds {MAX_TOKENS} tokens, its most: revoke some, or let them expire"
            )));
        }
        minted.tokens.insert(stored.id.clone(), stored);
        if let Err(err) = self.persist(&minted) {
            minted.tokens.remove(&info.id);
            return Err(err);
        }
        Ok(MintedToken {
            token: secret,
            info,
        })
    }

    /// The tokens neither revoked nor expired for more than a day, newest first.
    pub fn list(&self) -> Vec<TokenInfo> {
        let now = now();
        let minted = self.lock();
        let mut tokens: Vec<TokenInfo> = minted
            .tokens
            .values()
            .filter(|t| t.expires.saturating_add(LISTED_AFTER_EXPIRY_SECS) > now)
            .map(|t| info(t, now))
            .collect();
        tokens.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
        tokens
    }

    /// Revokes token `id` and every token it minted, directly or not (a token is valid only
    /// while its minter is): their next requests are refused. Returns the descendants revoked.
    pub fn revoke(&self, id: &str) -> Result<Vec<String>, TokenError> {
        let mut minted = self.lock();
        if !minted.tokens.contains_key(id) {
            return Err(TokenError::Unknown(id.to_owned()));
        }
        let family = descendants(&minted.tokens, id);
        let removed: Vec<Stored> = std::iter::once(id)
            .chain(family.iter().map(String::as_str))
            .filter_map(|id| minted.tokens.remove(id))
            .collect();
        let forgotten: Vec<(String, u64)> = removed
            .iter()
            .filter_map(|token| remember_revoked(&mut minted, token))
            .collect();
        if let Err(err) = self.persist(&minted) {
            for token in removed {
                minted.revoked.remove(&token.id);
                minted.tokens.insert(token.id.clone(), token);
            }
            minted.revoked.extend(forgotten);
            return Err(err);
        }
        self.revocations.send_modify(|n| *n += 1);
        Ok(family)
    }

    /// Resolves when `caller`'s token stops being valid (revoked or expired), with why; never
    /// for the root token or a server without one. What a stream it opened waits on, to end
    /// with it.
    pub async fn lapsed(self: std::sync::Arc<Self>, caller: Caller) -> String {
        let Caller::Minted { id, expires, .. } = caller else {
            return std::future::pending().await;
        };
        let left = expires.saturating_sub(now());
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(left);
        let mut revocations = self.revocations.subscribe();
        loop {
            if self.lock().revoked.contains_key(&id) {
                return Refused::Revoked { id }.to_string();
            }
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {
                    return Refused::Expired { id, at: at(expires) }.to_string();
                }
                changed = revocations.changed() => {
                    if changed.is_err() {
                        return std::future::pending().await;
                    }
                }
            }
        }
    }

    /// Writes the store (when there is one): a new file beside it, synced, renamed over it.
    fn persist(&self, minted: &Minted) -> Result<(), TokenError> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let Some(path) = &self.store else {
            return Ok(());
        };
        let store_error = |why: String| TokenError::Store {
            path: path.clone(),
            why,
        };
        let file = StoreFile {
            version: STORE_VERSION,
            tokens: minted.tokens.values().cloned().collect(),
            revoked: minted
                .revoked
                .iter()
                .map(|(id, expires)| RevokedId {
                    id: id.clone(),
                    expires: *expires,
                })
                .collect(),
        };
        let bytes = serde_json::to_vec_pretty(&file).map_err(|e| store_error(e.to_string()))?;
        let staged = path.with_extension(format!("tmp-{:08x}", rand::random::<u32>()));
        let written = (|| {
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&staged)?;
            out.write_all(&bytes)?;
            out.sync_all()?;
            std::fs::rename(&staged, path)
        })();
        written.map_err(|err| {
            let _ = std::fs::remove_file(&staged);
            store_error(format!("writing it: {err}"))
        })
    }
}

/// Forgets tokens expired for more than a day and revoked ids past their expiry.
/// The ids of the tokens `id` minted, and those they minted, in the order found.
fn descendants(tokens: &BTreeMap<String, Stored>, id: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut next = 0;
    let mut parents = vec![id.to_owned()];
    // Bounded: each token is found at most once, and there are at most MAX_TOKENS.
    while let Some(parent) = parents.get(next).cloned() {
        next += 1;
        for child in tokens.values().filter(|t| t.minted_by == parent) {
            if !found.contains(&child.id) && child.id != id {
                found.push(child.id.clone());
                parents.push(child.id.clone());
            }
        }
    }
    found
}

/// Keeps `token`'s id as revoked until it would have expired. Bounded too: past the most, the
/// id that expires first is forgotten (its token is refused as unknown rather than as
/// revoked); that one is returned, for an undo.
fn remember_revoked(minted: &mut Minted, token: &Stored) -> Option<(String, u64)> {
    let mut forgotten = None;
    if minted.revoked.len() >= MAX_TOKENS
        && let Some(oldest) = minted
            .revoked
            .iter()
            .min_by_key(|(_, expires)| **expires)
            .map(|(id, expires)| (id.clone(), *expires))
    {
        minted.revoked.remove(&oldest.0);
        forgotten = Some(oldest);
    }
    minted.revoked.insert(token.id.clone(), token.expires);
    forgotten
}

fn prune(minted: &mut Minted, now: u64) {
    minted
        .tokens
        .retain(|_, t| t.expires.saturating_add(LISTED_AFTER_EXPIRY_SECS) > now);
    minted.revoked.retain(|_, expires| *expires > now);
}

fn info(token: &Stored, now: u64) -> TokenInfo {
    TokenInfo {
        id: token.id.clone(),
        name: token.name.clone(),
        scopes: token.scopes.clone(),
        minted_by: token.minted_by.clone(),
        created_at: at(token.created),
        expires_at: at(token.expires),
        expired: now >= token.expires,
    }
}

#[cfg(test)]
mod tests;
