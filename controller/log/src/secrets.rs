//! Secrets the harness holds, kept out of sandboxes, the model's context and session logs.
//!
//! Containment is what keeps a command from reading the harness's secrets (SAFETY.md); this is
//! the second line: every text the harness records or hands a model passes a [`Redactor`],
//! which replaces every run of at least [`WINDOW`] consecutive characters of a known secret,
//! wherever it starts and ends. A `cut -c 1-25` of a key, then a `cut -c 26-80`, are both
//! redacted; a secret re-encoded (base64, hex, reversed) or printed a few characters at a time
//! is not, and cannot be.

use std::borrow::Cow;

use aho_corasick::AhoCorasick;

/// Environment variables that hold model API keys.
pub const ENV_VARS: &[&str] = &["OPENAI_API_KEY", "ANTHROPIC_API_KEY"];

/// The shortest run of a secret that is redacted, and the shortest value taken for a secret:
/// shorter runs would redact ordinary text.
pub const WINDOW: usize = 8;

/// Parts of a variable's name that say it holds a secret.
const SECRET_NAMES: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
    "PRIVATE",
];

/// Whether a variable's name says its value is a secret (`OPENAI_API_KEY`, `HOOK_TOKEN`,
/// `OTEL_EXPORTER_OTLP_HEADERS` with its authorization, …).
fn secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAMES.iter().any(|part| upper.contains(part)) || upper.ends_with("_HEADERS")
}

/// The secret values to redact: the model keys, every variable of this process whose name
/// says it holds a secret (header lists split into their values), plus `extra` (a sandbox's
/// token, a hook's or an MCP server's header values).
pub fn values(extra: &[String]) -> Vec<String> {
    let mut values: Vec<String> = Vec::new();
    for (name, value) in std::env::vars() {
        if ENV_VARS.contains(&name.as_str()) || secret_name(&name) {
            values.push(value.trim().to_owned());
            // `key=value,key2=value2` (OTLP headers) and `Bearer TOKEN`: each part too.
            for part in value.split([',', '=', ' ']) {
                values.push(part.trim().to_owned());
            }
        }
    }
    values.extend(extra.iter().map(|value| value.trim().to_owned()));
    values.retain(|value| value.chars().count() >= WINDOW);
    values.sort();
    values.dedup();
    values
}

/// Replaces every run of [`WINDOW`] or more characters of a secret with `[REDACTED]`.
#[derive(Debug, Clone)]
pub struct Redactor {
    /// Every `WINDOW`-character slice of every secret; `None` when there is no secret.
    windows: Option<AhoCorasick>,
}

const MARK: &str = "[REDACTED]";

impl Redactor {
    pub fn new(secrets: &[String]) -> Redactor {
        let mut windows: Vec<&str> = Vec::new();
        for secret in secrets {
            let bounds: Vec<usize> = secret
                .char_indices()
                .map(|(at, _)| at)
                .chain(std::iter::once(secret.len()))
                .collect();
            for start in 0..bounds.len().saturating_sub(WINDOW) {
                windows.push(&secret[bounds[start]..bounds[start + WINDOW]]);
            }
        }
        windows.sort_unstable();
        windows.dedup();
        let windows = (!windows.is_empty())
            .then(|| AhoCorasick::new(&windows).expect("plain string patterns always build"));
        Redactor { windows }
    }

    /// The byte ranges that lie in some secret's run of `WINDOW` or more characters, merged.
    fn runs(&self, haystack: &[u8]) -> Vec<(usize, usize)> {
        let Some(windows) = &self.windows else {
            return Vec::new();
        };
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for found in windows.find_overlapping_iter(haystack) {
            match runs.last_mut() {
                Some((_, end)) if found.start() <= *end => *end = (*end).max(found.end()),
                _ => runs.push((found.start(), found.end())),
            }
        }
        runs
    }

    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        match self.redact_bytes(text.as_bytes()) {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            // Runs are whole characters of a secret, so what is left is whole characters.
            Cow::Owned(bytes) => Cow::Owned(String::from_utf8_lossy(&bytes).into_owned()),
        }
    }

    pub fn redact_bytes<'b>(&self, bytes: &'b [u8]) -> Cow<'b, [u8]> {
        let runs = self.runs(bytes);
        if runs.is_empty() {
            return Cow::Borrowed(bytes);
        }
        let mut out = Vec::with_capacity(bytes.len());
        let mut at = 0;
        for (start, end) in runs {
            out.extend_from_slice(&bytes[at..start]);
            out.extend_from_slice(MARK.as_bytes());
            at = end;
        }
        out.extend_from_slice(&bytes[at..]);
        Cow::Owned(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789";

    #[test]
    fn a_secret_is_replaced_whole_and_by_any_slice_a_cut_makes() {
        let redactor = Redactor::new(&[KEY.to_owned()]);
        assert_eq!(
            redactor.redact(&format!("key {KEY} and {KEY}.")),
            "key [REDACTED] and [REDACTED]."
        );
        let line = format!("OPENAI_API_KEY={KEY}");
        for (from, to) in [(0, 25), (25, 80), (10, 18), (30, 60)] {
            let slice: String = line.chars().skip(from).take(to - from).collect();
            let redacted = redactor.redact(&slice);
            let left: Vec<&str> = KEY
                .as_bytes()
                .windows(WINDOW)
                .filter_map(|w| std::str::from_utf8(w).ok())
                .filter(|w| redacted.contains(w))
                .collect();
            assert!(left.is_empty(), "{slice:?} -> {redacted:?} keeps {left:?}");
        }
        // Shorter than a window: ordinary text, kept.
        assert_eq!(redactor.redact("sk-proj"), "sk-proj");
        assert_eq!(
            redactor.redact_bytes(format!("\u{ff} x{}y", &KEY[5..20]).as_bytes()),
            "\u{ff} x[REDACTED]y".as_bytes()
        );
    }

    #[test]
    fn secret_variables_are_found_by_name_and_split_into_their_parts() {
        assert!(secret_name("OTEL_EXPORTER_OTLP_HEADERS"));
        assert!(secret_name("HOOK_TOKEN"));
        assert!(secret_name("github_pat_auth"));
        assert!(!secret_name("PATH"));
        let values = values(&["short".to_owned(), "a-long-sandbox-token".to_owned()]);
        assert!(values.contains(&"a-long-sandbox-token".to_owned()));
        assert!(!values.contains(&"short".to_owned()));
    }
}
