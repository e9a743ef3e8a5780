//! The size bars of STYLE.md, held for both programs: no source file over 600 lines, no
//! source function over 80. Past those a module holds more than one idea and a function more
//! than one step, and the split is due; a bar nothing checks drifts.

use std::path::{Path, PathBuf};

use super::sources;

/// The source folders of both programs (tests and benches are not held to the bars).
const SOURCES: &[&str] = &[
    "controller/src",
    "controller/log/src",
    "controller/telemetry/src",
    "controller/models/src",
    "controller/policy/src",
    "controller/judge/src",
    "controller/runtime/src",
    "controller/replay/src",
    "controller/benchmark/src",
    "controller/view/src",
    "sandbox-server/src",
    "sandbox-server/protocol/src",
    "common/otel/src",
    "common/testkit/src",
];

/// The longest a source function may be, from its `fn` line to its closing brace.
const FUNCTION_LINES: usize = 80;

/// Functions allowed past the bar, as `path/from/root.rs name`, with the reason (none today).
const LONG_FUNCTIONS: &[(&str, &str)] = &[];

fn files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    SOURCES
        .iter()
        .flat_map(|dir| {
            let dir = root.join(dir);
            sources(&dir).into_iter().map(move |file| dir.join(file))
        })
        .collect()
}

#[test]
fn no_source_file_is_over_600_lines() {
    let long: Vec<String> = files()
        .into_iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(&path).unwrap().lines().count();
            (lines > 600).then(|| format!("{} ({lines})", path.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these: {long:?}");
}

#[test]
fn no_source_function_is_over_80_lines() {
    let mut long = Vec::new();
    for path in files() {
        if path.file_name().is_some_and(|name| name == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let file = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        for function in functions(&text) {
            let key = format!("{file} {}", function.name);
            let excused = LONG_FUNCTIONS.iter().any(|(long, _)| *long == key);
            if function.lines > FUNCTION_LINES && !excused {
                let (line, lines) = (function.line, function.lines);
                long.push(format!("{file}:{line} {} ({lines} lines)", function.name));
            }
        }
    }
    assert!(long.is_empty(), "split these into named steps: {long:#?}");
}

/// A function of a source file: its name, its first line (from 1) and its length in lines.
#[derive(Debug, PartialEq)]
struct Function {
    name: String,
    line: usize,
    lines: usize,
}

/// The functions with a body in `text`, but those inside a `#[cfg(test)]` item. A function
/// runs from its `fn` line to the brace that closes its body; braces in strings, characters
/// and comments do not count.
fn functions(text: &str) -> Vec<Function> {
    let mut found = Vec::new();
    let mut scan = Scan::default();
    // (name, first line, the depth its body opens at, inside a test item)
    let mut open: Vec<(String, usize, usize, bool)> = Vec::new();
    let mut pending: Option<(String, usize)> = None;
    let mut cfg_test = false;
    let mut test_depth: Option<usize> = None;
    let mut depth = 0;
    for (at, line) in text.lines().enumerate() {
        let code = scan.code(line);
        if code.trim_start().starts_with("#[cfg(test)]") {
            cfg_test = true;
        }
        if pending.is_none()
            && let Some(name) = fn_name(&code)
        {
            pending = Some((name, at));
        }
        for c in code.chars() {
            match c {
                '{' => {
                    depth += 1;
                    if let Some((name, start)) = pending.take() {
                        open.push((name, start, depth, cfg_test || test_depth.is_some()));
                    } else if cfg_test && test_depth.is_none() {
                        test_depth = Some(depth);
                    }
                    cfg_test = false;
                }
                '}' => {
                    if open.last().is_some_and(|(_, _, d, _)| *d == depth) {
                        let (name, start, _, in_test) = open.pop().unwrap();
                        if !in_test {
                            let (line, lines) = (start + 1, at - start + 1);
                            found.push(Function { name, line, lines });
                        }
                    }
                    if test_depth == Some(depth) {
                        test_depth = None;
                    }
                    depth = depth.saturating_sub(1);
                }
                // A declaration without a body (in a trait, or `extern`).
                ';' if pending.is_some() && !code.contains('{') => pending = None,
                _ => {}
            }
        }
    }
    found
}

/// The name of the function a line of code declares, if it declares one (`fn name`, not a
/// `fn(…)` pointer type).
fn fn_name(code: &str) -> Option<String> {
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(at) = code[from..].find("fn ").map(|i| i + from) {
        let before_ok =
            at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        let name: String = code[at + 3..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if before_ok && !name.is_empty() {
            return Some(name);
        }
        from = at + 3;
    }
    None
}

/// What is left of a line once strings, characters and comments are taken out, carried
/// across lines (a block comment or a string can span several).
#[derive(Default)]
struct Scan {
    /// Nesting of `/* */` comments.
    comment: usize,
    /// Inside a string: `Some(n)` for a raw string closed by `"` and `n` hashes, `None` for a
    /// plain one.
    string: Option<Option<usize>>,
}

impl Scan {
    fn code(&mut self, line: &str) -> String {
        let chars: Vec<char> = line.chars().collect();
        let mut out = String::new();
        let mut i = 0;
        while i < chars.len() {
            let rest = &chars[i..];
            let starts = |s: &str| rest.iter().copied().take(s.len()).eq(s.chars());
            if self.comment > 0 {
                if starts("*/") {
                    self.comment -= 1;
                    i += 2;
                } else if starts("/*") {
                    self.comment += 1;
                    i += 2;
                } else {
                    i += 1;
                }
                continue;
            }
            match self.string {
                Some(Some(hashes)) => {
                    let close: String = std::iter::once('"')
                        .chain("#".repeat(hashes).chars())
                        .collect();
                    if starts(&close) {
                        self.string = None;
                        i += close.len();
                    } else {
                        i += 1;
                    }
                    continue;
                }
                Some(None) => {
                    match rest[0] {
                        '\\' => i += 2,
                        '"' => {
                            self.string = None;
                            i += 1;
                        }
                        _ => i += 1,
                    }
                    continue;
                }
                None => {}
            }
            if starts("//") {
                break;
            }
            if starts("/*") {
                self.comment += 1;
                i += 2;
                continue;
            }
            let ident_before = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
            let raw_at = usize::from(rest[0] == 'b');
            if !ident_before && rest.get(raw_at) == Some(&'r') {
                let hashes = rest[raw_at + 1..].iter().take_while(|c| **c == '#').count();
                if rest.get(raw_at + 1 + hashes) == Some(&'"') {
                    self.string = Some(Some(hashes));
                    i += raw_at + 2 + hashes;
                    continue;
                }
            }
            if rest[0] == '"' {
                self.string = Some(None);
                i += 1;
                continue;
            }
            if rest[0] == '\'' {
                // A character literal ('x', '\n', '\u{1F600}'), not a lifetime.
                let len = match rest.get(1) {
                    Some('\\') => rest.iter().skip(2).position(|c| *c == '\'').map(|p| p + 3),
                    Some(_) if rest.get(2) == Some(&'\'') => Some(3),
                    _ => None,
                };
                if let Some(len) = len {
                    i += len;
                    continue;
                }
            }
            out.push(rest[0]);
            i += 1;
        }
        out
    }
}

#[test]
fn the_counter_finds_functions_past_strings_comments_and_tests() {
    let text = r##"
fn short() {
    let s = "}{ not a brace";
    let c = '}';
    let r = r#"fn fake() { "#;
    /* } */
}
pub(crate) async fn longer<'a>(x: &'a str) -> fn(u32) -> u32 {
    // }
    if true {
        let _ = x;
    }
    |n| n + 1
}
trait T {
    fn declared(&self);
}
#[cfg(test)]
mod tests {
    fn helper() {}
}
"##;
    let found = functions(text);
    let names: Vec<(&str, usize, usize)> = found
        .iter()
        .map(|f| (f.name.as_str(), f.line, f.lines))
        .collect();
    assert_eq!(names, vec![("short", 2, 6), ("longer", 8, 7)]);
}
