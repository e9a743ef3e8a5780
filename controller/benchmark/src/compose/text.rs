//! The compose file's text below YAML: the project's `.env`, compose's variables, and the
//! shell-like splitting of a command given as one string.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Context, TaskResult, bail};

/// `KEY=VALUE` lines (`#` comments, optional quotes), as compose reads a project's `.env`.
pub(super) fn dot_env(path: &Path) -> TaskResult<BTreeMap<String, String>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
    };
    let mut out = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            bail!("{}: `{line}` is not KEY=VALUE", path.display());
        };
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        out.insert(key.trim().to_owned(), value.to_owned());
    }
    Ok(out)
}

/// Shell-like word splitting: whitespace, `'…'`, `"…"` (with `\"`), `\x`.
pub fn split_words(text: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => out.extend(current.take()),
            '\'' => {
                let word = current.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => word.push(c),
                    }
                }
            }
            '"' => {
                let word = current.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => word.push(chars.next()?),
                        c => word.push(c),
                    }
                }
            }
            '\\' => current.get_or_insert_with(String::new).push(chars.next()?),
            c => current.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(current);
    Some(out)
}

/// Compose's variable syntax over the file's text: `$$` is `$`, `${VAR}`, `${VAR:-default}`,
/// `${VAR-default}`, `$VAR`; unknown variables are empty, as compose makes them.
pub fn interpolate(text: &str, vars: &BTreeMap<String, String>) -> String {
    let lookup = |name: &str| -> Option<String> { vars.get(name).cloned() };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(more) = after.strip_prefix('$') {
            out.push('$');
            rest = more;
        } else if let Some(body) = after.strip_prefix('{') {
            let Some(end) = body.find('}') else {
                out.push_str(&rest[at..]);
                return out;
            };
            let inner = &body[..end];
            let value = if let Some((name, default)) = inner.split_once(":-") {
                lookup(name)
                    .filter(|v| !v.is_empty())
                    .unwrap_or_else(|| default.to_owned())
            } else if let Some((name, default)) = inner.split_once('-') {
                lookup(name).unwrap_or_else(|| default.to_owned())
            } else {
                let name = inner.split(['?', ':']).next().unwrap_or(inner);
                lookup(name).unwrap_or_default()
            };
            out.push_str(&value);
            rest = &body[end + 1..];
        } else {
            let name_len = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .count();
            if name_len == 0 {
                out.push('$');
                rest = after;
            } else {
                out.push_str(&lookup(&after[..name_len]).unwrap_or_default());
                rest = &after[name_len..];
            }
        }
    }
    out.push_str(rest);
    out
}
