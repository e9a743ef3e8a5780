//! `--known-files`: the files a client says it holds, with their hashes and stat.

use std::path::PathBuf;

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

/// `sandbox-server known-files`: the files of `hashes` that are regular files of the recorded
/// size beneath `workspace`, each with the stat it has there, written to `out` (whole, then
/// renamed). A file that is missing, of another kind or size is left out: the server's first
/// snapshot hashes it as usual.
pub(crate) fn stamp(
    workspace: &std::path::Path,
    hashes: &std::path::Path,
    out: &std::path::Path,
) -> anyhow::Result<usize> {
    use anyhow::Context;
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    let files = read(hashes)?;
    let partial = out.with_extension("partial");
    let file = std::fs::File::create(&partial)
        .with_context(|| format!("creating {}", partial.display()))?;
    let mut writer = std::io::BufWriter::new(file);
    let mut named = 0;
    for mut file in files {
        let Ok(meta) = std::fs::symlink_metadata(workspace.join(&file.path)) else {
            continue;
        };
        if !meta.file_type().is_file() || meta.size() != file.size {
            continue;
        }
        file.mtime = [meta.mtime(), meta.mtime_nsec()];
        file.ctime = [meta.ctime(), meta.ctime_nsec()];
        file.ino = meta.ino();
        serde_json::to_writer(&mut writer, &file).context("writing the list")?;
        writer.write_all(b"\n").context("writing the list")?;
        named += 1;
    }
    writer
        .into_inner()
        .map_err(|err| err.into_error())
        .and_then(|file| file.sync_all())
        .with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, out)
        .with_context(|| format!("renaming {} to {}", partial.display(), out.display()))?;
    Ok(named)
}

/// `known-files`' arguments.
#[derive(Debug, clap::Args)]
pub struct KnownFilesArgs {
    /// The workspace the paths are relative to.
    #[arg(long, env = "SANDBOX_WORKSPACE")]
    pub workspace: PathBuf,
    /// The files and their verified hashes (JSON Lines of `KnownFile`).
    #[arg(long)]
    pub hashes: PathBuf,
    /// Where the list goes (written whole, then renamed into place).
    #[arg(long)]
    pub out: PathBuf,
}

impl KnownFilesArgs {
    /// Writes the list; returns how many files it names.
    pub fn run(&self) -> anyhow::Result<usize> {
        stamp(&self.workspace, &self.hashes, &self.out)
    }
}
