//! `write_file`: replace a file's content atomically, creating missing folders.

use sandbox_protocol::BuiltIn;
use sandbox_protocol::{WriteFileArgs, WriteFileResult};

use super::check_path;
use crate::sandbox::blocking;
use crate::sandbox::registry::{About, Tool, ToolContext, ToolError, Validate};

pub struct WriteFile;

impl Validate for WriteFileArgs {
    fn validate(&self) -> Result<(), String> {
        check_path(&self.path)
    }
}

impl Tool for WriteFile {
    type Args = WriteFileArgs;
    type Output = WriteFileResult;

    const ABOUT: About = About {
        tool: BuiltIn::WriteFile,
        description: "Write a file in the working directory.",
        scope: sandbox_protocol::Scope::Write,
    };

    async fn execute(
        &self,
        args: WriteFileArgs,
        ctx: ToolContext,
    ) -> Result<WriteFileResult, ToolError> {
        blocking(move || {
            let outcome = ctx
                .workspace
                .write_atomic(&args.path, args.content.as_bytes())?;
            let n_bytes = args.content.len() as u64;
            Ok(WriteFileResult {
                output: format!("wrote {n_bytes} bytes"),
                path: args.path,
                bytes_written: n_bytes,
                created: outcome.created,
            })
        })
        .await?
    }
}
