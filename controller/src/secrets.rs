//! Secrets the harness holds, kept out of sandboxes and session logs.

/// Environment variables that hold model API keys.
pub const ENV_VARS: &[&str] = &["OPENAI_API_KEY", "ANTHROPIC_API_KEY"];

/// The secret values to redact: the API keys in the environment, plus `extra` (a sandbox token).
pub fn values(extra: &[String]) -> Vec<String> {
    let mut values: Vec<String> = ENV_VARS
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .map(|value| value.trim().to_owned())
        // Very short values would redact ordinary text; no real key is that short.
        .filter(|value| value.len() >= 8)
        .collect();
    values.extend(extra.iter().filter(|value| value.len() >= 8).cloned());
    values.sort();
    values.dedup();
    values
}

/// Replaces every secret in `text` with `[REDACTED]`.
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    for secret in secrets {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), "[REDACTED]");
        }
    }
    out
}

/// The same over bytes (blobs), leaving invalid UTF-8 alone.
pub fn redact_bytes(bytes: &[u8], secrets: &[String]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for secret in secrets {
        let needle = secret.as_bytes();
        if needle.is_empty() {
            continue;
        }
        let mut result = Vec::with_capacity(out.len());
        let mut rest = &out[..];
        let mut changed = false;
        while let Some(at) = rest
            .windows(needle.len())
            .position(|window| window == needle)
        {
            result.extend_from_slice(&rest[..at]);
            result.extend_from_slice(b"[REDACTED]");
            rest = &rest[at + needle.len()..];
            changed = true;
        }
        if changed {
            result.extend_from_slice(rest);
            out = result;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_replaced_everywhere() {
        let secrets = vec!["sk-abcdef123456".to_owned()];
        assert_eq!(
            redact("key sk-abcdef123456 and sk-abcdef123456.", &secrets),
            "key [REDACTED] and [REDACTED]."
        );
        assert_eq!(
            redact_bytes(b"\xff sk-abcdef123456", &secrets),
            b"\xff [REDACTED]".to_vec()
        );
        assert_eq!(
            values(&["short".to_owned(), "a-long-sandbox-token".to_owned()])
                .last()
                .unwrap(),
            "a-long-sandbox-token"
        );
    }
}
