//! Paths as the policy judges them: normalised before matching (`.`, `..`, `//`), and, for a
//! shell word with globs, braces, a tilde or variables, every path it could expand to.
//!
//! A credential location is reached by a word when the word could name it: `~/.ss?/i?_rsa`,
//! `~/.aws/cred*`, `/e?c/shadow` and `$HOME/.ssh/*` all do. The check expands the word's
//! braces, puts every home the sandbox may have for `~` and `$HOME`, and matches it as the
//! shell would (a `*` does not match a leading dot) against concrete paths inside each
//! credential location; an unknown variable matches anything, though a word made only of
//! unknowns (`$FILE`) is taken to name nothing in particular.

mod stores;

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

/// One element of a shell path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Char(char),
    /// `*`: any run within a component, not a leading dot.
    Star,
    /// `?`: one character, not `/`, not a leading dot.
    Question,
    /// `[…]`: one character of the set (or not, when negated).
    Class {
        negated: bool,
        items: Vec<(char, char)>,
    },
    /// An unknown variable or substitution: anything at all.
    Any,
}

impl Token {
    /// The character, when the token is a plain one (no wildcard, set or unknown).
    fn as_char(&self) -> Option<char> {
        match self {
            Token::Char(c) => Some(*c),
            _ => None,
        }
    }
}

/// The text `tokens` spell when every one is a plain character; `None` for a pattern.
fn literal(tokens: &[Token]) -> Option<String> {
    tokens.iter().map(Token::as_char).collect()
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

/// `{a,b}` alternatives, outermost first (nested braces expand in turn).
pub(crate) fn expand_braces(raw: &str) -> Vec<String> {
    let bytes = raw.as_bytes();
    let Some(open) = bytes.iter().position(|&b| b == b'{') else {
        return vec![raw.to_owned()];
    };
    let mut depth = 0;
    let mut commas = Vec::new();
    for (at, &b) in bytes.iter().enumerate().skip(open) {
        match b {
            b'{' => depth += 1,
            b',' if depth == 1 => commas.push(at),
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    if commas.is_empty() {
                        break;
                    }
                    let (head, tail) = (&raw[..open], &raw[at + 1..]);
                    let mut bounds = vec![open];
                    bounds.extend(&commas);
                    bounds.push(at);
                    return bounds
                        .windows(2)
                        .flat_map(|pair| {
                            expand_braces(&format!("{head}{}{tail}", &raw[pair[0] + 1..pair[1]]))
                        })
                        .collect();
                }
            }
            _ => {}
        }
    }
    vec![raw.to_owned()]
}

/// Shell word text to pattern tokens: quotes literal, `$HOME` and a leading `~` the home, other
/// expansions anything.
fn lex(raw: &str, home: &str) -> Vec<Token> {
    let chars: Vec<char> = raw.chars().collect();
    let mut tokens = Vec::new();
    let mut at = 0;
    let mut quote: Option<char> = None;
    while at < chars.len() {
        let c = chars[at];
        at += 1;
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => tokens.push(Token::Char(c)),
            (_, '$') => at = variable(&chars, at, home, &mut tokens),
            (_, '`') => {
                while at < chars.len() && chars[at] != '`' {
                    at += 1;
                }
                at += 1;
                tokens.push(Token::Any);
            }
            (Some(_), '\\') if at < chars.len() && "$`\"\\".contains(chars[at]) => {
                tokens.push(Token::Char(chars[at]));
                at += 1;
            }
            (Some(_), c) => tokens.push(Token::Char(c)),
            (None, '\'' | '"') => quote = Some(c),
            (None, '\\') if at < chars.len() => {
                tokens.push(Token::Char(chars[at]));
                at += 1;
            }
            (None, '~') if at == 1 => {
                // `~name` is that user's home: root's, or a home like any other.
                let name: String = chars[at..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                    .collect();
                at += name.chars().count();
                let path = match name.as_str() {
                    "" => home.to_owned(),
                    "root" => "/root".to_owned(),
                    _ => "/home/user".to_owned(),
                };
                tokens.extend(path.chars().map(Token::Char));
            }
            (None, '*') => tokens.push(Token::Star),
            (None, '?') => tokens.push(Token::Question),
            (None, '[') => at = class(&chars, at, &mut tokens),
            (None, c) => tokens.push(Token::Char(c)),
        }
    }
    tokens
}

/// `$NAME`, `${…}`, `$(…)` from just after the `$`; returns where the word goes on.
fn variable(chars: &[char], mut at: usize, home: &str, tokens: &mut Vec<Token>) -> usize {
    let name: String;
    match chars.get(at) {
        Some('{') => {
            let end = chars[at..]
                .iter()
                .position(|&c| c == '}')
                .map_or(chars.len(), |p| at + p);
            // `${HOME:-/root}`, `${HOME%/}`, `${HOME:?}`: the variable is the leading name;
            // `${!ref}` is whatever ref names.
            name = chars[at + 1..end.min(chars.len())]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                .collect();
            at = end + 1;
        }
        Some('(') => {
            let mut depth = 0;
            while at < chars.len() {
                match chars[at] {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                at += 1;
            }
            tokens.push(Token::Any);
            return at + 1;
        }
        Some(c) if c.is_ascii_alphabetic() || *c == '_' => {
            let start = at;
            while at < chars.len() && (chars[at].is_ascii_alphanumeric() || chars[at] == '_') {
                at += 1;
            }
            name = chars[start..at].iter().collect();
        }
        // `$$`, `$!`, `$1`, `$@`: a special parameter, anything at all.
        Some(c) if c.is_ascii_digit() || "$!@*#?-".contains(*c) => {
            tokens.push(Token::Any);
            return at + 1;
        }
        _ => {
            tokens.push(Token::Char('$'));
            return at;
        }
    }
    match known_location(&name, home) {
        Some(path) => tokens.extend(path.chars().map(Token::Char)),
        None => tokens.push(Token::Any),
    }
    at
}

/// Where the variables that name tools' folders point by default: a path built on one reaches
/// what the tool keeps there.
fn known_location(name: &str, home: &str) -> Option<String> {
    let path = match name {
        "HOME" => return Some(home.to_owned()),
        "XDG_CONFIG_HOME" => "/.config",
        "XDG_DATA_HOME" => "/.local/share",
        "CARGO_HOME" => "/.cargo",
        "GNUPGHOME" => "/.gnupg",
        "DOCKER_CONFIG" => "/.docker",
        "AZURE_CONFIG_DIR" => "/.azure",
        "CLOUDSDK_CONFIG" => "/.config/gcloud",
        "KUBECONFIG" => "/.kube/config",
        "AWS_SHARED_CREDENTIALS_FILE" => "/.aws/credentials",
        "AWS_CONFIG_FILE" => "/.aws/config",
        "NETRC" => "/.netrc",
        "RCLONE_CONFIG" => "/.config/rclone/rclone.conf",
        _ => return None,
    };
    Some(format!("{home}{path}"))
}

/// `[…]` from just after the `[`; a `[` with no closing `]` is a literal.
fn class(chars: &[char], start: usize, tokens: &mut Vec<Token>) -> usize {
    let mut at = start;
    let negated = matches!(chars.get(at), Some('!' | '^'));
    if negated {
        at += 1;
    }
    let mut items = Vec::new();
    let mut first = true;
    while at < chars.len() && (chars[at] != ']' || first) {
        let low = chars[at];
        if chars.get(at + 1) == Some(&'-') && chars.get(at + 2).is_some_and(|&c| c != ']') {
            items.push((low, chars[at + 2]));
            at += 3;
        } else {
            items.push((low, low));
            at += 1;
        }
        first = false;
    }
    if at >= chars.len() {
        tokens.push(Token::Char('['));
        return start;
    }
    tokens.push(Token::Class { negated, items });
    at + 1
}

/// Whether the tokens match the whole of `text`, as a shell matches a path.
fn matches(tokens: &[Token], text: &str) -> bool {
    let text: Vec<char> = text.chars().collect();
    // reachable[t]: the tokens so far can end at text[..t].
    let mut reachable = vec![false; text.len() + 1];
    reachable[0] = true;
    for token in tokens {
        let mut next = vec![false; text.len() + 1];
        for t in 0..=text.len() {
            if !reachable[t] {
                continue;
            }
            let component_start = t == 0 || text[t - 1] == '/';
            match token {
                Token::Any => (t..=text.len()).for_each(|k| next[k] = true),
                Token::Star => {
                    next[t] = true;
                    let mut k = t;
                    while k < text.len()
                        && text[k] != '/'
                        && !(k == t && component_start && text[k] == '.')
                    {
                        k += 1;
                        next[k] = true;
                    }
                }
                Token::Question => {
                    if t < text.len() && text[t] != '/' && !(component_start && text[t] == '.') {
                        next[t + 1] = true;
                    }
                }
                Token::Class { negated, items } => {
                    if t < text.len() && text[t] != '/' {
                        let inside = items.iter().any(|&(lo, hi)| (lo..=hi).contains(&text[t]));
                        if inside != *negated {
                            next[t + 1] = true;
                        }
                    }
                }
                Token::Char(c) => {
                    if t < text.len() && text[t] == *c {
                        next[t + 1] = true;
                    }
                }
            }
        }
        reachable = next;
    }
    // A trailing slash names the same folder.
    reachable[text.len()]
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
