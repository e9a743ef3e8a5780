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

/// `text` as a terminal may be shown it: each control character but a newline and a tab — C0
/// (ESC among them), DEL and C1 (U+0080 to U+009F: CSI, OSC) — replaced by its visible escape
/// `\u001b`, four hex digits (JSON's spelling, so a JSON text keeps its value). A log's text
/// is untrusted: a model's reply or a command's output may carry escape sequences that would
/// otherwise drive the reader's terminal (write its clipboard with OSC 52, hide a line, forge a
/// link). For text on its way to a terminal (stdout), never for HTML or JSON files.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    use std::fmt::Write as _;
    if !text.chars().any(is_control_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_control_char(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A control character (Unicode's `Cc`: C0, DEL, C1) other than a newline or a tab.
fn is_control_char(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// A writer that passes what it is given through [`terminal_safe`] to `inner`: a log's text on
/// its way to a terminal. Bytes that are not UTF-8 are shown as `\x9b`; a character split
/// between two writes is held until the rest of it comes (a flush shows a held part as bytes).
pub struct TerminalSafe<W> {
    inner: W,
    held: Vec<u8>,
}

impl<W: std::io::Write> TerminalSafe<W> {
    pub fn new(inner: W) -> TerminalSafe<W> {
        TerminalSafe {
            inner,
            held: Vec::new(),
        }
    }

    fn pass(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let mut rest = bytes;
        while let Err(err) = std::str::from_utf8(rest) {
            let (valid, after) = rest.split_at(err.valid_up_to());
            let valid = std::str::from_utf8(valid).unwrap_or_default();
            self.inner.write_all(terminal_safe(valid).as_bytes())?;
            let Some(bad) = err.error_len() else {
                // The start of a character whose rest is still to come.
                self.held = after.to_vec();
                return Ok(());
            };
            for byte in &after[..bad] {
                write!(self.inner, "\\x{byte:02x}")?;
            }
            rest = &after[bad..];
        }
        let text = std::str::from_utf8(rest).unwrap_or_default();
        self.inner.write_all(terminal_safe(text).as_bytes())
    }
}

impl<W: std::io::Write> std::io::Write for TerminalSafe<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.held.is_empty() {
            self.pass(buf)?;
        } else {
            let mut joined = std::mem::take(&mut self.held);
            joined.extend_from_slice(buf);
            self.pass(&joined)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        for byte in std::mem::take(&mut self.held) {
            write!(self.inner, "\\x{byte:02x}")?;
        }
        self.inner.flush()
    }
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
    fn control_characters_are_shown_not_sent_to_the_terminal() {
        use std::io::Write as _;
        let hostile = "ok\tline\n\u{1b}]52;c;aGk=\u{7}\u{1b}[2J\r\u{7f}\u{9b}31m é ✓";
        let safe = terminal_safe(hostile);
        assert_eq!(
            safe,
            "ok\tline\n\\u001b]52;c;aGk=\\u0007\\u001b[2J\\u000d\\u007f\\u009b31m é ✓"
        );
        assert!(matches!(
            terminal_safe("plain\ttext\n"),
            std::borrow::Cow::Borrowed(_)
        ));
        // Through the writer: a character split between writes, and bytes that are not UTF-8.
        let mut out = TerminalSafe::new(Vec::new());
        let bytes = hostile.as_bytes();
        let cut = bytes.iter().position(|b| *b == 0xc2).unwrap() + 1;
        out.write_all(&bytes[..cut]).unwrap();
        out.write_all(&bytes[cut..]).unwrap();
        out.write_all(b" \xff\x9b\xc2").unwrap();
        out.flush().unwrap();
        let shown = String::from_utf8(out.inner).unwrap();
        assert_eq!(shown, format!("{safe} \\xff\\x9b\\xc2"));
        assert!(
            !shown
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t')
        );
    }

    #[test]
    fn escapes_as_python_does() {
        assert_eq!(
            escape(r#"a<b & "c" 'd'>"#),
            "a&lt;b &amp; &quot;c&quot; &#x27;d&#x27;&gt;"
        );
    }
}
