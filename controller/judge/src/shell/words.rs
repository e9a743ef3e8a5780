//! Words and redirects: evaluated statically where bash's result is certain (quotes removed,
//! escapes applied, `$'…'` decoded), marked dynamic (with why) where it is not; nested
//! commands inside them (`$(…)`, backticks, `<(…)`, here-doc bodies) are walked too.

use tree_sitter::Node;

use super::{Dynamism, MAX_DEPTH, Redirect, Walker, Word, children};

impl Walker<'_> {
    /// A redirect; `extra` receives words the grammar hangs on it that are really arguments
    /// (tree-sitter-bash parses `git push >/dev/null --force` as `> /dev/null --force`).
    pub(super) fn redirect(
        &mut self,
        node: Node<'_>,
        out: &mut Vec<Redirect>,
        extra: &mut Vec<Word>,
        depth: usize,
    ) {
        let mut redirect = Redirect {
            fd: None,
            op: String::new(),
            target: Word::Static(String::new()),
            heredoc: None,
            heredoc_dynamic: false,
        };
        let mut target = None;
        match node.kind() {
            "file_redirect" | "herestring_redirect" => {
                for (field, child) in children(node) {
                    match field {
                        Some("descriptor") => redirect.fd = Some(self.text(child)),
                        Some("destination") => {
                            let word = self.word(child, depth);
                            match target {
                                None => target = Some(word),
                                Some(_) => extra.push(word),
                            }
                        }
                        _ if !child.is_named() => redirect.op.push_str(&self.text(child)),
                        _ if child.kind() == "file_descriptor" => {
                            redirect.fd = Some(self.text(child))
                        }
                        _ => target = Some(self.word(child, depth)),
                    }
                }
            }
            "heredoc_redirect" => {
                target = self.heredoc(node, &mut redirect, out, extra, depth);
            }
            _ => {
                self.unknown(node, "an unknown redirect");
                return;
            }
        }
        if target.is_none() && redirect.op.ends_with('-') {
            target = Some(Word::Static("-".to_owned())); // `3>&-` closes fd 3
        }
        redirect.op = redirect.op.trim().to_owned();
        redirect.target = target.unwrap_or_else(|| Word::Dynamic {
            raw: self.text(node),
            why: Dynamism::Other,
        });
        out.push(redirect);
    }

    /// A here-doc: its delimiter (the target), its body, and what the grammar hangs on it.
    fn heredoc(
        &mut self,
        node: Node<'_>,
        redirect: &mut Redirect,
        out: &mut Vec<Redirect>,
        extra: &mut Vec<Word>,
        depth: usize,
    ) -> Option<Word> {
        let mut target = None;
        for (field, child) in children(node) {
            match (field, child.kind()) {
                (Some("descriptor"), _) => redirect.fd = Some(self.text(child)),
                (_, "heredoc_start") => target = Some(Word::Static(self.text(child))),
                (_, "heredoc_body") => {
                    redirect.heredoc = Some(self.text(child));
                    for (_, part) in children(child) {
                        if part.is_named() && part.kind() != "heredoc_content" {
                            redirect.heredoc_dynamic = true;
                            self.word(part, depth); // finds $( ) in the body
                        }
                    }
                }
                (_, "heredoc_end") => {}
                // `cat <<EOF > f`: the grammar hangs later redirects here.
                (Some("redirect"), _) => self.redirect(child, out, extra, depth),
                // `cat <<EOF | sh` and `&& x`: the rest of the pipeline or list.
                (Some("right"), _) | (_, "pipeline") => {
                    self.context.push("after-heredoc");
                    self.statement(child, depth + 1);
                    self.context.pop();
                }
                (Some("argument"), _) => {
                    self.unknown(child, "a here-doc argument");
                    extra.push(self.word(child, depth));
                }
                _ if !child.is_named() => redirect.op.push_str(&self.text(child)),
                _ => self.unknown(child, "an unexpected here-doc part"),
            }
        }
        target
    }

    /// Evaluates a word-like node statically; records the commands nested in it.
    pub(super) fn word(&mut self, node: Node<'_>, depth: usize) -> Word {
        if depth > MAX_DEPTH {
            self.unknown(node, "nesting too deep");
            return self.dynamic(node, Dynamism::Other);
        }
        match node.kind() {
            "word" | "number" if node.named_child_count() == 0 => self.bare_word(node),
            "raw_string" => {
                let text = self.text(node);
                Word::Static(text[1..text.len().saturating_sub(1).max(1)].to_owned())
            }
            "string" => self.double_quoted(node, depth),
            "ansi_c_string" => {
                let text = self.text(node);
                match decode_ansi_c(&text[2..text.len().saturating_sub(1).max(2)]) {
                    Some(decoded) => Word::Static(decoded),
                    None => self.dynamic(node, Dynamism::Other),
                }
            }
            "concatenation" => self.concatenation(node, depth),
            "command_substitution" => {
                self.nested(node, "$()", depth);
                self.dynamic(node, Dynamism::CommandSubstitution)
            }
            "process_substitution" => {
                let context = if self.text(node).starts_with('>') {
                    ">()"
                } else {
                    "<()"
                };
                self.nested(node, context, depth);
                self.dynamic(node, Dynamism::ProcessSubstitution)
            }
            "simple_expansion" => self.dynamic(node, Dynamism::Parameter),
            "expansion" => self.expansion(node, depth),
            "brace_expression" => self.dynamic(node, Dynamism::Brace),
            other => {
                let why = match other {
                    "arithmetic_expansion" => "arithmetic expansion",
                    "translated_string" => "a $\"…\" string",
                    "ERROR" => "a parse error",
                    _ => "an unsupported word part",
                };
                self.unknown(node, why);
                self.nested_words(node, depth);
                self.dynamic(node, Dynamism::Other)
            }
        }
    }

    fn double_quoted(&mut self, node: Node<'_>, depth: usize) -> Word {
        let mut dynamic = None;
        for (_, child) in children(node) {
            if child.is_named() && child.kind() != "string_content" {
                // $x, ${x}, $(...), $((...)) inside "..."
                if let Word::Dynamic { why, .. } = self.word(child, depth + 1) {
                    dynamic.get_or_insert(why);
                }
            }
        }
        match dynamic {
            Some(why) => self.dynamic(node, why),
            None => {
                let text = self.text(node);
                Word::Static(unescape_dquoted(
                    &text[1..text.len().saturating_sub(1).max(1)],
                ))
            }
        }
    }

    fn concatenation(&mut self, node: Node<'_>, depth: usize) -> Word {
        let mut value = String::new();
        let mut dynamic = None;
        let mut pos = node.start_byte();
        for (_, child) in children(node) {
            if child.start_byte() != pos {
                dynamic.get_or_insert(Dynamism::Other);
            }
            pos = child.end_byte();
            if !child.is_named() {
                // A literal `$` or `=`: taken verbatim.
                value.push_str(&self.text(child));
                continue;
            }
            match self.word(child, depth + 1) {
                Word::Static(part) => value.push_str(&part),
                Word::Dynamic { why, .. } => {
                    dynamic.get_or_insert(why);
                }
            }
        }
        if pos != node.end_byte() {
            dynamic.get_or_insert(Dynamism::Other);
        }
        // `{a,b}` is split into `{`, `a,b`, `}`: check the unquoted skeleton.
        let skeleton: String = children(node)
            .iter()
            .map(|(_, child)| match child.kind() {
                "word" => self.text(*child),
                _ if !child.is_named() => self.text(*child),
                _ => "Q".to_owned(),
            })
            .collect();
        if brace_expands(&skeleton) {
            dynamic.get_or_insert(Dynamism::Brace);
        }
        match dynamic {
            Some(why) => self.dynamic(node, why),
            None => Word::Static(value),
        }
    }

    /// `${x:-$(cmd)}` and the like: nested commands are walked.
    fn expansion(&mut self, node: Node<'_>, depth: usize) -> Word {
        for (_, child) in children(node) {
            match child.kind() {
                "variable_name" | "special_variable_name" => {}
                "subscript" => {
                    if let Some(index) = child.child_by_field_name("index") {
                        self.any(index, depth + 1);
                    }
                }
                _ if child.is_named() => self.any(child, depth + 1),
                _ => {}
            }
        }
        self.dynamic(node, Dynamism::Parameter)
    }

    fn nested(&mut self, node: Node<'_>, context: &'static str, depth: usize) {
        self.context.push(context);
        let stage = self.stage.take();
        for (field, child) in children(node) {
            if field == Some("redirect") {
                // `$(< file)`
                let mut redirects = Vec::new();
                let mut extra = Vec::new();
                self.redirect(child, &mut redirects, &mut extra, depth + 1);
                self.push(Vec::new(), Vec::new(), redirects);
            } else if child.is_named() && child.kind() != "comment" {
                self.statement(child, depth + 1);
            }
        }
        self.stage = stage;
        self.context.pop();
    }

    fn nested_words(&mut self, node: Node<'_>, depth: usize) {
        for (_, child) in children(node) {
            if child.is_named() {
                self.any(child, depth + 1);
            }
        }
    }

    fn dynamic(&self, node: Node<'_>, why: Dynamism) -> Word {
        Word::Dynamic {
            raw: self.text(node),
            why,
        }
    }

    /// An unquoted word: backslash escapes apply; globs, a tilde and braces make it dynamic.
    fn bare_word(&self, node: Node<'_>) -> Word {
        let raw = self.text(node);
        let mut out = String::new();
        let mut chars = raw.chars().peekable();
        let mut first = true;
        let mut why = None;
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('\n') => {}
                    Some(escaped) => out.push(escaped),
                    None => out.push('\\'),
                },
                '*' | '?' | '[' => {
                    why.get_or_insert(Dynamism::Glob);
                    out.push(c)
                }
                '~' if first => {
                    why.get_or_insert(Dynamism::Tilde);
                    out.push(c)
                }
                '{' if brace_expands(&raw) => {
                    why.get_or_insert(Dynamism::Brace);
                    out.push(c)
                }
                '$' | '`' | '(' | ')' | '\'' | '"' => {
                    // Should have been parsed into other nodes.
                    why.get_or_insert(Dynamism::Other);
                    out.push(c)
                }
                _ => out.push(c),
            }
            first = false;
        }
        match why {
            Some(why) => Word::Dynamic { raw, why },
            None => Word::Static(out),
        }
    }
}

/// True when a `\<newline>` (an odd run of backslashes before a newline) has a non-blank
/// character on both sides, i.e. bash would join two pieces into one word.
pub(super) fn joins_words_by_line_continuation(source: &str) -> bool {
    let bytes = source.as_bytes();
    (1..bytes.len()).any(|i| {
        if bytes[i] != b'\n' || bytes[i - 1] != b'\\' {
            return false;
        }
        let run = bytes[..i].iter().rev().take_while(|&&c| c == b'\\').count();
        let before = bytes[..i - run].last().copied();
        let after = bytes.get(i + 1).copied();
        run % 2 == 1
            && before.is_some_and(|c| !c.is_ascii_whitespace())
            && after.is_some_and(|c| !c.is_ascii_whitespace())
    })
}

/// Whether unquoted text (quoted parts replaced by a placeholder) brace-expands: `{a,b}` or
/// `{1..3}`, but not `{}` or `@{u}`.
pub fn brace_expands(text: &str) -> bool {
    let bytes = text.as_bytes();
    for start in 0..bytes.len() {
        if bytes[start] != b'{' {
            continue;
        }
        let mut depth = 0;
        for end in start..bytes.len() {
            match bytes[end] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        let inner = &text[start + 1..end];
                        if inner.contains(',') || inner.contains("..") {
                            return true;
                        }
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    false
}

/// The value of a double-quoted string's body: only `\$`, `` \` ``, `\"`, `\\` and
/// `\<newline>` are escapes there.
fn unescape_dquoted(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(escaped @ ('$' | '`' | '"' | '\\')) => out.push(escaped),
            Some('\n') => {}
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// Decodes the body of `$'…'`; `None` for anything not handled (the word is then dynamic).
pub fn decode_ansi_c(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let escape = chars.next()?;
        let simple = match escape {
            'n' => Some('\n'),
            't' => Some('\t'),
            'r' => Some('\r'),
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'e' | 'E' => Some('\x1b'),
            'f' => Some('\x0c'),
            'v' => Some('\x0b'),
            '\\' | '\'' | '"' | '?' => Some(escape),
            _ => None,
        };
        if let Some(decoded) = simple {
            out.push(decoded);
            continue;
        }
        let (radix, max) = match escape {
            'x' => (16, 2),
            '0'..='7' => (8, 3),
            _ => return None, // \u, \U, \c: not decoded
        };
        let mut digits = String::new();
        if radix == 8 {
            digits.push(escape);
        }
        while digits.len() < max {
            match chars.peek() {
                Some(d) if d.is_digit(radix) => {
                    digits.push(*d);
                    chars.next();
                }
                _ => break,
            }
        }
        let value = u32::from_str_radix(&digits, radix).ok()?;
        // A byte >= 0x80 alone would not be UTF-8.
        out.push(char::from_u32(value).filter(|c| c.is_ascii())?);
    }
    Some(out)
}
