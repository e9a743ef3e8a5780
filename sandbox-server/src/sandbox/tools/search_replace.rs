//! `search_replace`: replace exactly one occurrence of a text, keeping every other byte.

use std::io::Read;

use sandbox_protocol::{SearchReplaceArgs, SearchReplaceResult};

use super::{check_path, io_failure};
use crate::sandbox::blocking;
use crate::sandbox::registry::{Tool, ToolContext, ToolError, Validate};

pub struct SearchReplace;

impl Validate for SearchReplaceArgs {
    fn validate(&self) -> Result<(), String> {
        check_path(&self.path)?;
        if self.search.is_empty() {
            return Err("search: must not be empty".to_owned());
        }
        Ok(())
    }
}

impl Tool for SearchReplace {
    type Args = SearchReplaceArgs;
    type Output = SearchReplaceResult;

    fn name(&self) -> &'static str {
        "search_replace"
    }

    fn description(&self) -> &'static str {
        "Replace one exact match in a file in the working directory."
    }

    async fn execute(
        &self,
        args: SearchReplaceArgs,
        ctx: ToolContext,
    ) -> Result<SearchReplaceResult, ToolError> {
        blocking(move || {
            let path = args.path.as_str();
            let (mut file, size) = ctx.workspace.open_regular(path)?;
            let mut content = Vec::with_capacity(size as usize);
            file.read_to_end(&mut content)
                .map_err(|err| io_failure(path, err))?;
            // Bytes, not text: CRLF, a BOM, a missing final newline and any encoding survive.
            let search = args.search.as_bytes();
            let mut matches = memchr::memmem::find_iter(&content, search);
            let first = matches.next();
            let count = usize::from(first.is_some()) + matches.count();
            let Some(at) = first.filter(|_| count == 1) else {
                return Err(ToolError::MatchCount {
                    message: format!(
                        "{path}: search string occurs {count}x, expected exactly once"
                    ),
                    count,
                });
            };
            let mut updated = Vec::with_capacity(content.len() - search.len() + args.replace.len());
            updated.extend_from_slice(&content[..at]);
            updated.extend_from_slice(args.replace.as_bytes());
            updated.extend_from_slice(&content[at + search.len()..]);
            ctx.workspace.write_atomic(path, &updated)?;
            Ok(SearchReplaceResult {
                output: "OK".to_owned(),
                path: args.path,
                bytes_written: updated.len() as u64,
            })
        })
        .await?
    }
}
