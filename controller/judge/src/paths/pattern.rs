//! Shell path patterns: a word's braces expanded, its text lexed into pattern tokens (quotes,
//! the home, variables, globs and sets), and the tokens matched against a path as the shell
//! matches one.

/// One element of a shell path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Token {
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
    pub(super) fn as_char(&self) -> Option<char> {
        match self {
            Token::Char(c) => Some(*c),
            _ => None,
        }
    }
}

/// The text `tokens` spell when every one is a plain character; `None` for a pattern.
pub(super) fn literal(tokens: &[Token]) -> Option<String> {
    tokens.iter().map(Token::as_char).collect()
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
pub(super) fn lex(raw: &str, home: &str) -> Vec<Token> {
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
pub(super) fn matches(tokens: &[Token], text: &str) -> bool {
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
