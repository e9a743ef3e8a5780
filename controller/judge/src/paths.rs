//! Paths as the policy judges them: normalised before matching (`.`, `..`, `//`), and, for a
//! shell word with globs, braces, a tilde or variables, every path it could expand to.
//!
//! A credential location is reached by a word when the word could name it: `~/.ss?/i?_rsa`,
//! `~/.aws/cred*`, `/e?c/shadow` and `$HOME/.ssh/*` all do. The check expands the word's
//! braces, puts every home the sandbox may have for `~` and `$HOME`, and matches it as the
//! shell would (a `*` does not match a leading dot) against concrete paths inside each
//! credential location; an unknown variable matches anything, though a word made only of
//! unknowns (`$FILE`) is taken to name nothing in particular.

mod pattern;
mod stores;

pub(crate) use pattern::expand_braces;
use pattern::{Token, lex, literal, matches};

/// The homes `~` and `$HOME` may stand for in a sandbox.
fn homes() -> Vec<String> {
    let mut homes = vec!["/root".to_owned(), "/home/user".to_owned()];
    if let Ok(home) = std::env::var("HOME")
        && home.starts_with('/')
        && !homes.contains(&home)
    {
        homes.push(home);
    }
    homes
}

/// Lexical normalisation: `.` and empty components go, `..` takes its parent (kept when it
/// leads), a leading `./` goes. `src/../.git//config` is `.git/config`.
pub fn normalize(path: &str) -> String {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => match parts.last() {
                Some(&last) if last != ".." => {
                    parts.pop();
                }
                _ if absolute => {}
                _ => parts.push(".."),
            },
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    if absolute {
        format!("/{joined}")
    } else if joined.is_empty() {
        ".".to_owned()
    } else {
        joined
    }
}

/// The credential location a shell word (as written, quotes and all) could reach, if any.
pub fn credential_reached(raw: &str) -> Option<String> {
    let homes = homes();
    for alternative in word_alternatives(raw) {
        for home in &homes {
            let tokens = lex(&alternative, home);
            // A word of nothing but unknowns (`$FILE`, `$(cmd)`) names no place in particular.
            if !tokens
                .iter()
                .any(|t| matches!(t, Token::Char(c) if *c != '/'))
            {
                continue;
            }
            if let Some(hit) = stores::reach(&tokens, &homes) {
                return Some(hit);
            }
        }
    }
    None
}

/// The paths a shell word stands for, before its tokens: its brace alternatives, each also as
/// climbed to the root (`../../etc`), and with `..` resolved where it follows `/proc`'s links
/// (`/proc/thread-self` is `/proc/self/task/self`).
fn word_alternatives(raw: &str) -> Vec<String> {
    let mut alternatives = expand_braces(raw);
    alternatives.extend(alternatives.clone().iter().filter_map(|a| rooted(a)));
    let resolved: Vec<String> = alternatives
        .iter()
        .filter(|a| a.contains("/.."))
        .map(|a| normalize(&proc_links(a)))
        .collect();
    alternatives.extend(resolved);
    alternatives
}

/// `/proc/thread-self` as the folder it links to, so that `..` from it climbs as the kernel's.
fn proc_links(path: &str) -> String {
    path.replace("/proc/thread-self", "/proc/self/task/self")
}

/// The credential a file tool's path (plain text, no shell meaning) names, if any.
pub fn credential_path(path: &str) -> Option<String> {
    let homes = homes();
    let path = normalize(&proc_links(path));
    let mut paths = vec![path.clone()];
    paths.extend(rooted(&path));
    for (home, path) in homes.iter().flat_map(|h| paths.iter().map(move |p| (h, p))) {
        let expanded = match path.strip_prefix("~/") {
            Some(rest) => format!("{home}/{rest}"),
            None if path == "~" => home.clone(),
            None => path.clone(),
        };
        let tokens: Vec<Token> = expanded.chars().map(Token::Char).collect();
        if let Some(hit) = stores::reach(&tokens, &homes) {
            return Some(hit);
        }
    }
    None
}

/// The raw device, kernel memory or kernel image a shell word could reach, if any.
pub fn device_reached(raw: &str) -> Option<String> {
    let home = homes().remove(0);
    word_alternatives(raw).iter().find_map(|alternative| {
        let tokens = lex(alternative, &home);
        match literal(&tokens) {
            Some(text) => stores::device_path(&normalize(&proc_links(&text))),
            None => stores::device(&tokens),
        }
    })
}

/// The same for a file tool's plain path.
pub fn device_path(path: &str) -> Option<String> {
    stores::device_path(&normalize(&proc_links(path)))
}

/// `../../etc/shadow` climbs to the root from a deep enough folder: `/etc/shadow`.
fn rooted(path: &str) -> Option<String> {
    let rest = path.trim_start_matches("./");
    if !rest.starts_with("../") {
        return None;
    }
    let mut rest = rest;
    while let Some(next) = rest.strip_prefix("../") {
        rest = next;
    }
    Some(format!("/{rest}"))
}

/// The credential location inside a folder a word names (`~`, `$HOME`, `/`, `/home`), for
/// commands that walk folders; `None` for other folders and for words with other expansions.
pub fn credential_ancestor(raw: &str) -> Option<String> {
    let text = raw.trim_matches(|c| c == '"' || c == '\'');
    let text = text.strip_suffix("/*").unwrap_or(text);
    for home in homes() {
        let expanded = ["~", "${HOME}", "$HOME"]
            .iter()
            .find_map(|prefix| {
                let rest = text.strip_prefix(prefix)?;
                (rest.is_empty() || rest.starts_with('/')).then(|| format!("{home}{rest}"))
            })
            .unwrap_or_else(|| text.to_owned());
        if !expanded.starts_with('/') || expanded.contains(['$', '`', '*', '?', '[', '{']) {
            return None;
        }
        let folder = any_home_folder(&normalize(&expanded));
        if let Some(store) = stores::below(&folder, &home) {
            return Some(store.to_owned());
        }
    }
    None
}

/// `/home/NAME/…` as `/home/user/…`: every home is a home.
fn any_home_folder(folder: &str) -> String {
    match folder.strip_prefix("/home/") {
        Some(rest) if !rest.is_empty() => match rest.split_once('/') {
            Some((_, below)) => format!("/home/user/{below}"),
            None => "/home/user".to_owned(),
        },
        _ => folder.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_normalise_lexically() {
        for (path, expected) in [
            (".//.git/config", ".git/config"),
            ("src/../.git/config", ".git/config"),
            (".git/./config", ".git/config"),
            ("a/../../b", "../b"),
            ("/workspace/../root/.ssh/x", "/root/.ssh/x"),
            ("./", "."),
            ("/../etc", "/etc"),
        ] {
            assert_eq!(normalize(path), expected, "{path}");
        }
    }

    #[test]
    fn globs_braces_and_variables_reach_credentials() {
        for word in [
            "~/.ss?/i?_rsa",
            "~/.aws/cred*",
            "/e?c/shadow",
            "$HOME/.ssh/*",
            "\"$HOME\"/.ssh/id_ed25519",
            "~/.kube/conf[i]g",
            "~/.docker/*.json",
            "~/.{ssh,aws}/*",
            "${HOME}/.netrc",
            "/proc/self/environ",
            "/proc/*/environ",
            "/home/*/.ssh/id_rsa",
            ".ssh/id_rsa",
            "keys/id_ed25519",
            "~/.ssh",
            "'/etc/shadow'",
            "$D/.ssh/id_rsa",
            // Issue 24: stores by class, homes by any name, /proc by any path.
            "~/*",
            "~root/.vault-token",
            "/home/alice/.config/rclone/rclone.conf",
            "$XDG_CONFIG_HOME/gh/hosts.yml",
            "~/.azure/msal_token_cache.json",
            "~/.cargo/credentials.toml",
            "/etc/ssl/private/server.key",
            "/root/deploy/prod.pem",
            "/proc/*/task/*/environ",
            "/proc/thread-self/../../../1/environ",
            "/proc/1/cmdline",
            "/proc/$$/mem",
            "/proc/1/root/etc/shadow",
        ] {
            assert!(credential_reached(word).is_some(), "{word}");
        }
        for word in [
            "~/.cargo/config.toml",
            "/etc/ssl/certs/ca-certificates.pem",
            "/proc/self/cmdline",
            "/proc/1/status",
            "/proc/cpuinfo",
            "tests/fixtures/server.key",
        ] {
            assert_eq!(credential_reached(word), None, "{word}");
        }
        for (word, device) in [
            ("/dev/sda", true),
            ("/dev/disk/by-id/x", true),
            ("/dev/sd?", true),
            ("/dev/../dev/vda", true),
            ("/proc/kcore", true),
            ("/boot/vmlinuz-$(uname -r)", true),
            ("/dev/null", false),
            ("/dev/urandom", false),
            ("/dev/pts/3", false),
            ("$OUT/sda", false),
            ("\"$f\"", false),
        ] {
            assert_eq!(device_reached(word).is_some(), device, "{word}");
        }
        for word in [
            "src/main.rs",
            "~/.bashrc",
            "README.md",
            "$FILE",
            "*.txt",
            "/etc/hosts",
        ] {
            assert_eq!(credential_reached(word), None, "{word}");
        }
    }
}
