//! `shell` (opt-in: `--tools`): the model's own persistent shell. Each call runs one command
//! in it, as if typed, so `cd`, exported variables and functions stay for the next call, which
//! `bash` (a fresh shell per call) cannot do. It is the process `model-shell` of the table, so
//! `GET /v1/processes/model-shell/…` follows it; a timeout interrupts the command, not the
//! shell; a shell that exited is started again by the next call, which says so.

use sandbox_protocol::BuiltIn;
use sandbox_protocol::{ProcessState, ShellRunRequest, ShellRunResult, StartShellRequest};

use crate::sandbox::processes::{self, ManagedError};
use crate::sandbox::registry::{About, Tool, ToolContext, ToolError, Validate};

/// The id of the model's shell in the process table.
pub const MODEL_SHELL_ID: &str = "model-shell";

pub struct Shell;

impl Validate for ShellRunRequest {
    fn validate(&self) -> Result<(), String> {
        super::bash::check_command(&self.cmd, self.timeout)
    }
}

impl Tool for Shell {
    type Args = ShellRunRequest;
    type Output = ShellRunResult;

    const ABOUT: About = About {
        tool: BuiltIn::Shell,
        description: "Run a command in your persistent bash shell, which keeps its working directory, exported variables and functions from one call to the next (it starts in the working directory). Timeout is in seconds (max 3600): it interrupts the command as Ctrl-C would and the shell lives on. Input is not interactive: a command that reads standard input gets end of file.",
        scope: sandbox_protocol::Scope::Run,
    };

    async fn execute(
        &self,
        args: ShellRunRequest,
        ctx: ToolContext,
    ) -> Result<ShellRunResult, ToolError> {
        let timeout = args
            .timeout
            .unwrap_or(ctx.limits.default_timeout_secs)
            .min(ctx.limits.max_timeout_secs);
        let (managed, restarted) = model_shell(&ctx).await?;
        let mut result =
            processes::shell::run(&ctx.processes, &managed, &args.cmd, timeout, &ctx).await?;
        if restarted {
            result
                .result
                .output
                .push_str("\n(the shell had exited: this ran in a new one, without the old state)");
        }
        if !result.shell_alive {
            result
                .result
                .output
                .push_str("\n(the shell exited: the next call starts a new one)");
        }
        Ok(result)
    }
}

/// The model's shell, started when there is none or the last one ended; whether it replaced
/// one that ended.
async fn model_shell(
    ctx: &ToolContext,
) -> Result<(std::sync::Arc<processes::Managed>, bool), ManagedError> {
    let mut restarted = false;
    if let Ok(existing) = ctx.processes.get(MODEL_SHELL_ID) {
        if existing.describe().state == ProcessState::Running {
            return Ok((existing, false));
        }
        ctx.processes.delete(MODEL_SHELL_ID).await?;
        restarted = true;
    }
    let request = StartShellRequest {
        id: MODEL_SHELL_ID.to_owned(),
        cwd: None,
        env: Default::default(),
    };
    let (managed, _) = ctx.processes.start_shell(&request).await?;
    Ok((managed, restarted))
}
