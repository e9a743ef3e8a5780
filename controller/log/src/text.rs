//! Small text helpers shared by the prompt, the transcripts, the reports and the tool-name
//! globs of hooks, rules and MCP filters, and the one line diff they all show.

/// Python's `html.escape(text, quote=True)`: safe in HTML text and attribute values, as the seed
/// escapes XML-ish prompt tags.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            other => out.push(other),
        }
    }
    out
}

/// Parses a size as the task file writes it: `512m`, `2g`, `1.5g`, `1048576`.
pub fn parse_size(text: &str) -> Result<i64, String> {
    let trimmed = text.trim().to_ascii_lowercase();
    let trimmed = trimmed.trim_end_matches('b').trim_end_matches('i');
    let (number, unit) = match trimmed.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => trimmed.split_at(at),
        None => (trimmed, ""),
    };
    let scale: f64 = match unit {
        "" => 1.0,
        "k" => 1024.0,
        "m" => 1024.0 * 1024.0,
        "g" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("`{text}` is not a size (try 512m or 2g)")),
    };
    match number.trim().parse::<f64>() {
        Ok(value) if value > 0.0 && value.is_finite() => Ok((value * scale) as i64),
        _ => Err(format!("`{text}` is not a size (try 512m or 2g)")),
    }
}

/// `1 task`, `2 tasks`, `0 tasks`; a noun ending in `s` takes `es` (`1 process`, `2 processes`).
pub fn plural(n: impl TryInto<u64>, noun: &str) -> String {
    let n: u64 = n.try_into().unwrap_or(u64::MAX);
    match (n, noun.ends_with('s')) {
        (1, _) => format!("1 {noun}"),
        (_, true) => format!("{n} {noun}es"),
        (_, false) => format!("{n} {noun}s"),
    }
}

/// Whether `name` matches one of the `|`-separated globs of `pattern` (`*` any run, `?` one
/// character).
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    pattern
        .split('|')
        .any(|glob| one_glob(glob.as_bytes(), name.as_bytes()))
}

fn one_glob(glob: &[u8], name: &[u8]) -> bool {
    let (mut g, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match glob.get(g) {
            Some(b'*') => {
                star = Some((g, n));
                g += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                g += 1;
                n += 1;
            }
            _ => match star {
                Some((sg, sn)) => {
                    g = sg + 1;
                    n = sn + 1;
                    star = Some((sg, sn + 1));
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|&c| c == b'*')
}

/// At most the first `max` bytes of `text`, cut at a character's boundary.
pub fn head(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The unified diff, by lines and with three lines of context, of `old` (headed `from`) and
/// `new` (headed `to`). The texts may be hostile: Myers' diff of two large unrelated texts can
/// take hours, so past a second's work it settles for a coarser diff (still a correct one).
pub fn unified_diff(old: &str, new: &str, from: &str, to: &str) -> String {
    similar::TextDiff::configure()
        .timeout(std::time::Duration::from_secs(1))
        .diff_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(from, to)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_docker_writes_them() {
        assert_eq!(parse_size("512m"), Ok(512 * 1024 * 1024));
        assert_eq!(parse_size("2g"), Ok(2 * 1024 * 1024 * 1024));
        assert_eq!(parse_size("1.5GiB"), Ok(3 * 512 * 1024 * 1024));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").unwrap_err().contains("`lots`"));
        assert!(parse_size("-1g").is_err());
        assert!(parse_size("2t").is_err());
    }

    #[test]
    fn escapes_as_python_does() {
        assert_eq!(
            escape(r#"a<b & "c" 'd'>"#),
            "a&lt;b &amp; &quot;c&quot; &#x27;d&#x27;&gt;"
        );
    }
}
