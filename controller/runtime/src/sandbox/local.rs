//! `--sandbox local`: a sandbox-server child process over a folder on this machine.
//!
//! Started on 127.0.0.1 with port 0 and a fresh random token; its address comes from the one
//! line it prints. It is stopped (SIGTERM, then SIGKILL) when the session ends, on drop, and
//! by the kernel if this process dies first (`PR_SET_PDEATHSIG`).

// `pre_exec` for PR_SET_PDEATHSIG is this crate's one unsafe call; see the SAFETY comment.
#![allow(unsafe_code)]

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use super::{Doing, Failure, NetworkMode, SandboxClient};

/// A running local sandbox-server.
#[derive(Debug)]
pub struct LocalSandbox {
    child: tokio::process::Child,
    pub client: SandboxClient,
    /// Holds the token file until the server has read it.
    _token_dir: tempfile::TempDir,
}

/// Where the sandbox-server binary is: beside this executable, else on PATH.
pub fn find_server_binary() -> Result<PathBuf, Failure> {
    let name = "sandbox-server";
    let exe = std::env::current_exe().doing("finding this executable")?;
    if let Some(beside) = exe
        .parent()
        .map(|dir| dir.join(name))
        .filter(|path| path.is_file())
    {
        return Ok(beside);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(Failure::Server(format!(
        "cannot find the `{name}` binary beside {} or on PATH: build it with \
         `cargo build --release` (it lands beside `harness`), put it on PATH, or point \
         --sandbox at a running server's URL",
        exe.display()
    )))
}

/// How a local sandbox's server is started, besides its workspace and token.
#[derive(Debug, Clone)]
pub struct LocalOptions<'a> {
    /// The tools it offers (its own default set when none).
    pub tools: Option<&'a [String]>,
    pub network: NetworkMode,
    /// More paths its commands may write beneath.
    pub writable: &'a [PathBuf],
    /// Who its commands run as.
    pub run_as: RunAs,
    /// Where its own log lines go (this process's stderr when none).
    pub server_log: Option<&'a Path>,
    /// Its `--known-files`.
    pub known_files: Option<&'a Path>,
}

impl LocalOptions<'_> {
    /// No extra tool list, paths or log; no network; the default user.
    pub fn plain() -> LocalOptions<'static> {
        LocalOptions {
            tools: None,
            network: NetworkMode::None,
            writable: &[],
            run_as: RunAs::Default,
            server_log: None,
            known_files: None,
        }
    }
}

/// Who a local sandbox's commands run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAs {
    /// An unprivileged user when the harness is root ([`DEFAULT_USER`]), else the harness's own.
    Default,
    /// The harness's own user, root included (`--run-as root`).
    Own,
    /// Another user, as the server reads it: a name or `UID[:GID]` (`--run-as`).
    User(String),
}

/// The user commands run as by default when the harness is root.
pub const DEFAULT_USER: &str = "nobody";

impl RunAs {
    /// `root` (the harness's own user), a user's name or `UID[:GID]`; the server checks that
    /// the user exists when it starts.
    pub fn parse(text: &str) -> Result<RunAs, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("--run-as: expected root, a user name or UID[:GID]".to_owned());
        }
        if matches!(text, "root" | "0" | "0:0") {
            return Ok(RunAs::Own);
        }
        Ok(RunAs::User(text.to_owned()))
    }

    /// The `--run-as` value for the server, if any: only a root harness can hand its commands
    /// to another user.
    pub fn server_flag(&self) -> Result<Option<String>, String> {
        let root = nix::unistd::geteuid().is_root();
        match self {
            // Said to the server, so it knows root is the operator's choice, not an oversight.
            RunAs::Own if root => Ok(Some("0:0".to_owned())),
            RunAs::Own => Ok(None),
            RunAs::Default if root => Ok(Some(DEFAULT_USER.to_owned())),
            RunAs::Default => Ok(None),
            RunAs::User(user) if root => Ok(Some(user.clone())),
            RunAs::User(_) => Err(
                "--run-as: only a harness that runs as root can run commands as another user"
                    .to_owned(),
            ),
        }
    }

    /// What a person is told about it when the harness is root, if anything.
    pub fn note(&self) -> Option<String> {
        if !nix::unistd::geteuid().is_root() {
            return None;
        }
        Some(match self {
            RunAs::Default => format!(
                "commands: run as {DEFAULT_USER}, not root, since harness runs as root (they cannot read root's files; the workspace is theirs); --run-as root keeps root"
            ),
            RunAs::Own => {
                "commands: run as root (--run-as root): they read every file root can".to_owned()
            }
            RunAs::User(user) => format!("commands: run as {user} (--run-as)"),
        })
    }
}

impl LocalSandbox {
    /// Starts a server over `workspace` and waits until it is healthy.
    pub async fn start(
        workspace: &Path,
        token: &str,
        options: LocalOptions<'_>,
    ) -> Result<LocalSandbox, Failure> {
        Self::start_binary(&find_server_binary()?, workspace, token, options).await
    }

    /// As [`LocalSandbox::start`], with the server binary given.
    pub async fn start_binary(
        binary: &Path,
        workspace: &Path,
        token: &str,
        options: LocalOptions<'_>,
    ) -> Result<LocalSandbox, Failure> {
        let stderr = match options.server_log {
            Some(path) => Stdio::from(
                std::os::unix::fs::OpenOptionsExt::mode(
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(true),
                    0o600,
                )
                .open(path)
                .doing_with(|| format!("creating {}", path.display()))?,
            ),
            None => Stdio::inherit(),
        };
        let run_as = options.run_as.server_flag().map_err(Failure::Server)?;
        let (token_dir, token_file) = write_token(token)?;
        let mut command = server_command(binary, workspace, &token_file, options.network);
        command.stderr(stderr);
        if let Some(tools) = options.tools {
            command.arg("--tools").arg(tools.join(","));
        }
        if !options.writable.is_empty() {
            let paths: Vec<String> = options
                .writable
                .iter()
                .map(|path| path.display().to_string())
                .collect();
            command.arg("--writable").arg(paths.join(","));
        }
        if let Some(user) = run_as {
            command.arg("--run-as").arg(user);
        }
        if let Some(path) = options.known_files {
            command.arg("--known-files").arg(path);
        }
        let mut child = command
            .spawn()
            .doing_with(|| format!("starting {}", binary.display()))?;
        let address = read_address(&mut child).await?;
        let client = SandboxClient::new(&format!("http://{address}"), Some(token.to_owned()));
        client
            .wait_healthy(Duration::from_secs(15))
            .await
            .doing("waiting for the sandbox to be healthy")?;
        Ok(LocalSandbox {
            child,
            client,
            _token_dir: token_dir,
        })
    }

    /// Stops the server: SIGTERM, up to 10 s for it to finish, then SIGKILL.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
                .await
                .is_err()
            {
                tracing::warn!(pid, "the sandbox did not stop within 10 s; killing it");
                let _ = self.child.kill().await;
            }
        }
    }

    /// How the server exited, if it has.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The child's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

/// The token in a private file of a fresh folder (kept until the server has read it).
fn write_token(token: &str) -> Result<(tempfile::TempDir, PathBuf), Failure> {
    use std::io::Write;
    let token_dir = tempfile::tempdir().doing("creating a folder for the sandbox token")?;
    let token_file = token_dir.path().join("token");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&token_file)
        .doing("writing the sandbox token")?;
    file.write_all(token.as_bytes())
        .doing("writing the sandbox token")?;
    Ok((token_dir, token_file))
}

/// `sandbox-server serve` on a free loopback port, without the harness's secrets, ended with
/// the harness.
fn server_command(
    binary: &Path,
    workspace: &Path,
    token_file: &Path,
    network: NetworkMode,
) -> tokio::process::Command {
    #[allow(clippy::disallowed_methods)] // the controller's one child: its sandbox
    let mut command = tokio::process::Command::new(binary);
    command
        .arg("serve")
        .arg("--workspace")
        .arg(workspace)
        .args(["--listen", "127.0.0.1:0"])
        .arg("--token-file")
        .arg(token_file)
        // Stopping means the session is over (or abandoned on Ctrl-C): a command still
        // running gets 2 s, then the server kills it, well within `stop`'s 10 s.
        .args(["--shutdown-grace-secs", "2", "--kill-grace-ms", "1000"])
        .args(["--network", network.as_str()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        // A group of its own: a terminal's Ctrl-C (SIGINT to the foreground group) reaches the
        // harness only, which stops the session and then its sandbox; the server dying first
        // would look like an infrastructure failure, and a batch would retry the task.
        .process_group(0)
        .kill_on_drop(true);
    // The server gets only the variables it reads (and passes on an allow-list of to its
    // commands): the harness's keys, tokens and other settings are not the sandbox's business.
    command.env_clear();
    command.envs(std::env::vars_os().filter(|(name, _)| server_variable(name)));
    // The server's own progress lines would drown the session's; its warnings still show.
    if std::env::var_os("RUST_LOG").is_none() {
        command.env("RUST_LOG", "warn");
    }
    // SAFETY: runs in the child between fork and exec; prctl(2) is async-signal-safe and
    // touches no memory shared with the parent.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                .map_err(std::io::Error::from)
        });
    }
    command
}

/// Whether the local server inherits a variable of the harness: the commands' base set
/// (`PATH`, `HOME`, locale, terminal, user), its own settings (`SANDBOX_*`), its log and trace
/// settings as a container's server gets them ([`harness_otel::forwarded_variable`]: the OTLP
/// exporter's headers, the collector's credentials, are not). Nothing else: a model key, a
/// hook's token or the exporter's headers stay with the harness.
fn server_variable(name: &std::ffi::OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    const EXACT: &[&str] = &[
        "PATH",
        "HOME",
        "LANG",
        "TERM",
        "TZ",
        "USER",
        "LOGNAME",
        "SHELL",
        "TMPDIR",
        "RUST_LOG",
        "RUST_BACKTRACE",
        "NO_COLOR",
    ];
    EXACT.contains(&name)
        || name.starts_with("LC_")
        || (name.starts_with("SANDBOX_") && !name.contains("TOKEN"))
        || harness_otel::forwarded_variable(name)
}

/// The address from the one line the server prints once it is bound.
async fn read_address(child: &mut tokio::process::Child) -> Result<String, Failure> {
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Failure::Server("the sandbox's stdout is not piped".to_owned()))?;
    let mut line = String::new();
    let read = tokio::time::timeout(
        Duration::from_secs(15),
        BufReader::new(stdout).read_line(&mut line),
    )
    .await;
    match read {
        Ok(Ok(n)) if n > 0 => {
            /// `{"listening":"127.0.0.1:PORT"}` (`sandbox_protocol::LISTENING_KEY`).
            #[derive(serde::Deserialize)]
            struct AddressLine {
                listening: String,
            }
            let parsed: AddressLine = serde_json::from_str(&line).map_err(|err| {
                Failure::Server(format!(
                    "the sandbox printed {line:?} instead of its address line: {err}"
                ))
            })?;
            Ok(parsed.listening)
        }
        Ok(_) => {
            let status = child.wait().await.ok();
            Err(Failure::Server(format!(
                "the sandbox-server exited before it was ready ({status:?}); its error is above"
            )))
        }
        Err(_) => Err(Failure::Server(
            "the sandbox-server printed no address within 15 s".to_owned(),
        )),
    }
}
