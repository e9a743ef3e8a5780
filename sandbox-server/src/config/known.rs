//! `--known-files`: the files a client says it holds, with their hashes and stat.

/// The lines of a `--known-files` file, each checked: a bad line is refused by number, never
/// taken in part.
pub(super) fn read(
    path: &std::path::Path,
) -> Result<Vec<sandbox_protocol::KnownFile>, super::ConfigError> {
    let refuse = |why: String| super::ConfigError::Range {
        flag: "known-files",
        why: format!("{}: {why}", path.display()),
    };
    let text = std::fs::read_to_string(path).map_err(|err| refuse(err.to_string()))?;
    let mut files = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let file: sandbox_protocol::KnownFile =
            serde_json::from_str(line).map_err(|err| refuse(format!("line {}: {err}", n + 1)))?;
        let hex = file.sha256.len() == 64
            && file
                .sha256
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        let relative = !file.path.is_empty()
            && !file.path.starts_with('/')
            && file
                .path
                .split('/')
                .all(|part| !part.is_empty() && part != "." && part != "..");
        if !hex || !relative {
            return Err(refuse(format!(
                "line {}: `{}` needs a relative path without `.` or `..` and a sha256 of 64 lowercase hex digits",
                n + 1,
                file.path
            )));
        }
        files.push(file);
    }
    Ok(files)
}
