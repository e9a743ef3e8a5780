//! `read_file`: numbered lines of a text file, a page at a time.

use sandbox_protocol::BuiltIn;
use std::io::{BufRead, BufReader, Read, Seek};

use sandbox_protocol::{ReadFileArgs, ReadFileResult};

use super::{check_path, io_failure};
use crate::sandbox::blocking;
use crate::sandbox::output::Window;
use crate::sandbox::registry::{About, Tool, ToolContext, ToolError, Validate};

const DEFAULT_LIMIT: u64 = 2000;
const MAX_LIMIT: u64 = 100_000;
/// How much of the start of a file decides whether it is binary.
const SNIFF_BYTES: usize = 8192;

pub struct ReadFile;

impl Validate for ReadFileArgs {
    fn validate(&self) -> Result<(), String> {
        check_path(&self.path)?;
        if let Some(limit) = self.limit
            && !(1..=MAX_LIMIT).contains(&limit)
        {
            return Err(format!(
                "limit: must be between 1 and {MAX_LIMIT}, got {limit}"
            ));
        }
        Ok(())
    }
}

impl Tool for ReadFile {
    type Args = ReadFileArgs;
    type Output = ReadFileResult;

    const ABOUT: About = About {
        tool: BuiltIn::ReadFile,
        description: "Read numbered lines from a file in the working directory.",
        scope: sandbox_protocol::Scope::Read,
    };

    async fn execute(
        &self,
        args: ReadFileArgs,
        ctx: ToolContext,
    ) -> Result<ReadFileResult, ToolError> {
        blocking(move || read(&args, &ctx)).await?
    }
}

fn read(args: &ReadFileArgs, ctx: &ToolContext) -> Result<ReadFileResult, ToolError> {
    let path = args.path.as_str();
    let offset = args.offset.unwrap_or(0);
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT);
    let output_limit = ctx.limits.output_limit_chars;
    let (mut file, size) = ctx.workspace.open_regular(path)?;
    refuse_binary(&mut file, path, size)?;
    let page = read_page(
        file,
        path,
        offset..offset.saturating_add(limit),
        output_limit,
    )?;
    let first_line = offset + 1;
    let n_returned = page.lines.len() as u64;
    let output = render(&page, offset);
    let (output, truncated) = Window::whole(output).cut(
        output_limit,
        "the page was cut to the output limit: read fewer lines with a smaller limit, or a later offset",
    );
    Ok(ReadFileResult {
        output,
        path: path.to_owned(),
        total_lines: page.n_lines,
        first_line,
        lines_returned: n_returned,
        truncated,
    })
}

/// A file with a NUL byte in its first bytes is not text.
fn refuse_binary(file: &mut std::fs::File, path: &str, size: u64) -> Result<(), ToolError> {
    let mut sniff = Vec::with_capacity(SNIFF_BYTES);
    (&mut *file)
        .take(SNIFF_BYTES as u64)
        .read_to_end(&mut sniff)
        .map_err(|err| io_failure(path, err))?;
    if let Some(at) = sniff.iter().position(|&b| b == 0) {
        return Err(ToolError::BinaryFile(format!(
            "{path}: binary file ({size} bytes, a NUL byte at offset {at}); read_file shows text only, inspect it with bash instead (for example `xxd {path} | head`)"
        )));
    }
    file.rewind().map_err(|err| io_failure(path, err))
}

/// The lines of a page, and how many lines the whole file has.
struct Page {
    lines: Vec<Vec<u8>>,
    n_lines: u64,
}

/// One pass: keeps the lines of the page (each cut to what the model could ever see) and
/// counts all lines, so memory stays bounded whatever the file's size or line length.
/// The most bytes of lines one page gathers: four times the output limit, enough for the cut
/// the model sees, never the whole of a huge file. Lines past it are counted, not kept.
pub fn page_bytes(output_limit: usize) -> usize {
    output_limit.saturating_mul(4)
}

fn read_page(
    file: std::fs::File,
    path: &str,
    wanted: std::ops::Range<u64>,
    output_limit: usize,
) -> Result<Page, ToolError> {
    // One line never needs more than the output limit; a page never more than four of them.
    let line_cap = output_limit;
    let page_cap = page_bytes(output_limit);
    let mut held = 0usize;
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut page = Page {
        lines: Vec::new(),
        n_lines: 0,
    };
    let mut current: Vec<u8> = Vec::new();
    let mut at_line_start = true;
    loop {
        let chunk = reader.fill_buf().map_err(|err| io_failure(path, err))?;
        if chunk.is_empty() {
            break;
        }
        let chunk_len = chunk.len();
        for piece in chunk.split_inclusive(|&b| b == b'\n') {
            // Past the page's byte cap, later lines are counted but not kept.
            let in_page = wanted.contains(&page.n_lines) && held < page_cap;
            if in_page {
                let room = line_cap
                    .saturating_sub(current.len())
                    .min(page_cap.saturating_sub(held + current.len()));
                current.extend_from_slice(&piece[..piece.len().min(room)]);
            }
            at_line_start = piece.ends_with(b"\n");
            if at_line_start {
                if in_page {
                    held += current.len().max(1);
                    page.lines.push(std::mem::take(&mut current));
                }
                page.n_lines += 1;
            }
        }
        reader.consume(chunk_len);
    }
    if !at_line_start {
        if wanted.contains(&page.n_lines) && held < page_cap {
            page.lines.push(current);
        }
        page.n_lines += 1;
    }
    Ok(page)
}

/// Numbered lines, `{n:4}: text`, then where the page sits in the file.
fn render(page: &Page, offset: u64) -> String {
    let first_line = offset + 1;
    let n_lines = page.n_lines;
    let n_returned = page.lines.len() as u64;
    let lines: Vec<String> = page
        .lines
        .iter()
        .enumerate()
        .map(|(idx, line)| {
            let text = String::from_utf8_lossy(line);
            format!(
                "{:4}: {}",
                first_line + idx as u64,
                text.trim_end_matches(['\r', '\n'])
            )
        })
        .collect();
    let mut output = lines.join("\n");
    if n_lines == 0 {
        output = "(empty file)".to_owned();
    } else if n_returned == 0 {
        output = format!("(the file has {n_lines} lines; offset {offset} is past the end)");
    } else if offset + n_returned < n_lines || offset > 0 {
        let last = offset + n_returned;
        output.push_str(&format!("\n... (lines {first_line}-{last} of {n_lines}"));
        if last < n_lines {
            output.push_str(&format!("; use offset={last} to read more"));
        }
        output.push(')');
    }
    output
}
