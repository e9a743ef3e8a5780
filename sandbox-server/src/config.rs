//! Command-line flags (each also an env var `SANDBOX_*`) and their validated form.

mod access;
mod confine;
mod egress;
mod known;
pub use known::KnownFilesArgs;
mod tls;
mod user;
mod validate;
pub use egress::EgressArgs;
pub use tls::{TlsArgs, TlsFiles};
pub use user::parse_user;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

pub use access::Token;

mod size;

use crate::process::confine::ConfineRequest;
use crate::sandbox::Registry;

/// One isolated workspace behind an HTTP API: bash and file tools with hard timeouts,
/// bounded output capture and a confined workspace.
#[derive(Debug, Parser)]
#[command(name = "sandbox-server", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the API over a workspace.
    Serve(Box<ServeArgs>),
    /// Serve the workspace as an MCP server on stdin/stdout (for MCP clients that only start
    /// programs); the same flags as `serve`, whose `--listen` is not used. Logs go to stderr.
    McpStdio(Box<ServeArgs>),
    /// Print the OpenAPI document (all built-in tools enabled) to stdout.
    PrintOpenapi,
    /// Started by `serve`: waits for that server to end, then kills what it left running and
    /// removes its folder.
    #[command(hide = true)]
    Janitor(JanitorArgs),
    /// Started by `serve` in new PID and mount namespaces: becomes their PID 1, sets up the
    /// commands' `/proc` and `/dev`, then reaps orphans until the server ends.
    #[command(hide = true)]
    PidInit(PidInitArgs),
    /// A benchmark task's egress proxy: the one way out of its network in a phase with an
    /// allow list (the harness starts it in a container of its own).
    EgressProxy(EgressArgs),
    /// Copy this executable into FOLDER (as `sandbox-server`, mode 0755): a Kubernetes init
    /// container puts a static build into a volume another image's container runs it from.
    Install {
        /// The folder, created when missing.
        folder: PathBuf,
    },
    /// Write a `--known-files` list for a workspace as this machine sees it: each file of
    /// `--hashes` (path, sha256 and size; its stat fields are not read) that is a regular file
    /// of that size in `--workspace`, with the stat it has here. The harness runs it inside a
    /// fork's container image, whose files' stat no one outside the container can know.
    #[command(hide = true)]
    KnownFiles(KnownFilesArgs),
}

/// The namespaces' init's arguments.
#[derive(Debug, clap::Args)]
pub struct PidInitArgs {
    /// The commands' user (`UID:GID`), to whom the server's files under `--map` are mapped.
    #[arg(long)]
    pub run_as: Option<String>,
    /// A folder whose files owned by root look like the commands' user's to commands.
    #[arg(long)]
    pub map: Vec<PathBuf>,
    /// Make a user namespace of its own (the server is not root), and no PID namespace.
    #[arg(long)]
    pub own_user: bool,
    /// A path commands do not see (an empty folder or file in its place).
    #[arg(long)]
    pub hide: Vec<PathBuf>,
    /// A path shown again, read-write, inside a hidden one.
    #[arg(long)]
    pub keep: Vec<PathBuf>,
    /// A path shown again, read-only, inside a hidden one.
    #[arg(long)]
    pub read_only: Vec<PathBuf>,
}

impl PidInitArgs {
    pub fn spec(&self) -> Result<crate::process::confine::namespaces::init::InitSpec, ConfigError> {
        Ok(crate::process::confine::namespaces::init::InitSpec {
            run_as: self.run_as.as_deref().map(parse_user).transpose()?,
            map: self.map.clone(),
            own_user: self.own_user,
            hide: self.hide.clone(),
            keep: self.keep.clone(),
            read_only: self.read_only.clone(),
        })
    }
}

/// The janitor's arguments.
#[derive(Debug, clap::Args)]
pub struct JanitorArgs {
    /// The server to sweep after (`PID-START`).
    #[arg(long)]
    pub server: String,
    /// Its folder, removed after it.
    #[arg(long)]
    pub folder: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Network {
    None,
    Host,
    /// The container's own network is the boundary (a task's container, whose network its
    /// harness made offline or not); `--network-detail` says which, for `/v1/info`.
    Container,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The workspace root: file tools are confined to it and commands start in it.
    #[arg(long, env = "SANDBOX_WORKSPACE")]
    pub workspace: PathBuf,
    /// Address to listen on; port 0 picks a free one. The bound address is printed on stdout
    /// as one JSON line, `{"listening":"127.0.0.1:PORT"}`.
    #[arg(long, env = "SANDBOX_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Also serve `GET /metrics` (Prometheus) here, without the token: an address only the
    /// cluster's Prometheus reaches. On the main address `/metrics` needs the token like /v1.
    #[arg(long, env = "SANDBOX_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// A file holding the bearer token required on every /v1 route. Required unless the
    /// listen address is loopback.
    #[arg(long, env = "SANDBOX_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Keep the tokens minted with `POST /v1/tokens` (their hashes, never their secrets) in
    /// this file, so that a restart keeps them; without it they end with the server. Needs
    /// `--token-file`. Commands cannot read it.
    #[arg(long, env = "SANDBOX_TOKEN_STORE", value_name = "FILE")]
    pub token_store: Option<PathBuf>,
    /// Append one JSON line per request to this file: time, token id, client certificate
    /// subject, peer, method, route, tool, call id, status, duration and bytes (never paths,
    /// arguments, bodies or secrets). Commands cannot read it.
    #[arg(long, env = "SANDBOX_AUDIT_LOG", value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// Rotate the audit log when it would pass this size (`FILE.1`, `FILE.2`, …).
    #[arg(long, env = "SANDBOX_AUDIT_LOG_MAX_BYTES", value_parser = size::parse_size, default_value = "64MiB")]
    pub audit_log_max_bytes: u64,
    /// How many rotated audit logs to keep.
    #[arg(long, env = "SANDBOX_AUDIT_LOG_KEEP", default_value_t = 5)]
    pub audit_log_keep: u32,
    /// The tools to enable, comma-separated: of bash, read_file, write_file, search_replace,
    /// exec and write_stdin; the first four when absent. They are listed in registration
    /// order whatever the order here.
    #[arg(long, env = "SANDBOX_TOOLS", value_delimiter = ',')]
    pub tools: Option<Vec<String>>,
    /// Log format on stderr; `json` for log collectors. Levels come from RUST_LOG.
    #[arg(long, env = "SANDBOX_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Model-facing text is cut to this many characters, keeping head and tail.
    #[arg(long, env = "SANDBOX_OUTPUT_LIMIT", default_value_t = 25_000)]
    pub output_limit: usize,
    /// The full output of each stream is kept as an artifact up to this many bytes.
    #[arg(long, env = "SANDBOX_ARTIFACT_CAP", value_parser = size::parse_size, default_value = "64MiB")]
    pub artifact_cap: u64,
    /// Artifacts are evicted, oldest first, past this many bytes in total.
    #[arg(long, env = "SANDBOX_ARTIFACT_RETENTION", value_parser = size::parse_size, default_value = "1GiB")]
    pub artifact_retention: u64,
    /// Where artifacts are kept; a fresh folder under the temp dir (removed at exit) when absent.
    #[arg(long, env = "SANDBOX_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Request bodies over this size get 413 (a size: bytes, or with a unit such as 32MiB).
    #[arg(long, env = "SANDBOX_MAX_BODY_BYTES", value_parser = size::parse_size, default_value = "32MiB")]
    pub max_body_bytes: u64,
    /// Bytes of request bodies held in memory at once, over every route; a request that would
    /// pass it waits up to 10 s, then gets 429. File and archive uploads stream and hold none.
    #[arg(long, env = "SANDBOX_MAX_INFLIGHT_BODY_BYTES", value_parser = size::parse_size, default_value = "256MiB")]
    pub max_inflight_body_bytes: u64,
    /// `PUT /v1/workspace/archive`: the most bytes an archive may unpack to (and send).
    #[arg(long, env = "SANDBOX_ARCHIVE_MAX_BYTES", value_parser = size::parse_size, default_value = "2GiB")]
    pub archive_max_bytes: u64,
    /// `PUT /v1/workspace/archive`: the most entries an archive may hold.
    #[arg(long, env = "SANDBOX_ARCHIVE_MAX_ENTRIES", default_value_t = 1_000_000)]
    pub archive_max_entries: u64,
    /// The most paths one walk of the workspace may find: a snapshot, the changes since one
    /// and `GET /v1/workspace/archive` past it stop (413; the archive stream ends unfinished),
    /// as does a listing of one folder of more entries; a tool call asking for its step gets
    /// its result without one. Bounds the memory each manifest holds (about 200 bytes a path):
    /// raise it for a workspace of more files (a dataset of millions of images).
    #[arg(long, env = "SANDBOX_SCAN_MAX_ENTRIES", default_value_t = 1_000_000)]
    pub scan_max_entries: u64,
    /// Tool calls that may run at once; one more gets 429 with Retry-After.
    #[arg(long, env = "SANDBOX_MAX_CONCURRENT_CALLS", default_value_t = 64)]
    pub max_concurrent_calls: usize,
    /// Followers of process output at once (event streams, WebSockets, long-polls that wait);
    /// one more gets 429 with Retry-After.
    #[arg(long, env = "SANDBOX_MAX_FOLLOWERS", default_value_t = 64)]
    pub max_followers: usize,
    /// Bytes of output each process started by id keeps for its readers (past it the oldest
    /// chunks leave, and readers behind them are told what they missed).
    #[arg(long, env = "SANDBOX_PROCESS_BUFFER", value_parser = size::parse_size, default_value = "256KiB")]
    pub process_buffer: u64,
    /// Processes started by id kept at once, ended ones included (the oldest ended one is
    /// forgotten to make room).
    #[arg(long, env = "SANDBOX_MAX_PROCESSES", default_value_t = 256)]
    pub max_processes: usize,
    /// After SIGTERM to a timed-out or killed tree, milliseconds before SIGKILL.
    #[arg(long, env = "SANDBOX_KILL_GRACE_MS", default_value_t = 2000)]
    pub kill_grace_ms: u64,
    /// fsync every file the file tools and `PUT /v1/files` write before it replaces the old
    /// one. Off by default: writes are atomic either way (a temporary file renamed over the
    /// old), and only a power loss of the machine can lose an unsynced write, which loses a
    /// container's sandbox anyway.
    #[arg(long, env = "SANDBOX_DURABLE_WRITES")]
    pub durable_writes: bool,
    /// How long the answer to a request sent with an `Idempotency-Key` is kept for its
    /// repeats, in seconds after it completed. Keys live in memory only.
    #[arg(long, env = "SANDBOX_IDEMPOTENCY_TTL_SECS", default_value_t = 3600)]
    pub idempotency_ttl_secs: u64,
    /// Async worker threads. Commands run in their own processes, so 1 or 2 suffice; 1 gives the
    /// lowest latency on a small machine, 2 keeps one heavy output capture from delaying others.
    #[arg(long, env = "SANDBOX_WORKER_THREADS", default_value_t = 2)]
    pub worker_threads: usize,
    /// Paths left out of workspace snapshots, comma-separated: an entry with `/` (leading or
    /// inner) is a path from the root, one without matches that name at any depth.
    #[arg(
        long,
        env = "SANDBOX_SNAPSHOT_IGNORE",
        value_delimiter = ',',
        default_value = ".git/objects,.git/lfs"
    )]
    pub snapshot_ignore: Vec<String>,
    /// Paths outside the workspace whose hashes `GET /v1/state/fingerprint` reports
    /// (comma-separated, absolute), e.g. `$HOME/.bashrc,$HOME/.ssh,/etc/hosts`.
    #[arg(long, env = "SANDBOX_WATCH", value_delimiter = ',')]
    pub watch: Vec<String>,
    /// Files whose content the client already holds (JSON Lines, one `KnownFile` each: path,
    /// sha256, size, mtime, ctime, ino): the first snapshot takes their hashes without reading
    /// or keeping them while their `stat` is unchanged. `harness replay fork` gives its
    /// children's servers the verified workspace's files this way.
    #[arg(long, env = "SANDBOX_KNOWN_FILES")]
    pub known_files: Option<PathBuf>,
    /// Snapshots keep file versions up to this size for `GET /v1/blobs`; larger ones are hashed only, and a larger
    /// sparse one is not read (a change to it is seen by its size, times and inode).
    #[arg(long, env = "SANDBOX_BLOB_MAX_FILE_BYTES", value_parser = size::parse_size, default_value = "64MiB")]
    pub blob_max_file_bytes: u64,
    /// `none`: commands may open only Unix sockets (seccomp; an empty network namespace too where
    /// the host allows one), so they reach nothing, the server included. `host`: no restriction.
    /// `container`: no restriction by the server; the container's network is the boundary.
    #[arg(long, env = "SANDBOX_NETWORK", value_enum, default_value = "none")]
    pub network: Network,
    /// With `--network container`: what that network allows, as `/v1/info` reports it.
    #[arg(long, env = "SANDBOX_NETWORK_DETAIL")]
    pub network_detail: Option<String>,
    /// Do not confine commands' writes with Landlock (by default they may write only in the
    /// workspace, a private temporary folder and `--writable` paths).
    #[arg(long, env = "SANDBOX_NO_LANDLOCK")]
    pub no_landlock: bool,
    /// More paths commands may write beneath, comma-separated.
    #[arg(long, env = "SANDBOX_WRITABLE", value_delimiter = ',')]
    pub writable: Vec<PathBuf>,
    /// More paths commands may not see, comma-separated, besides the homes and the server's own
    /// files (the token file, token store, audit log, TLS key and client CA always are).
    #[arg(long, env = "SANDBOX_HIDDEN", value_delimiter = ',')]
    pub hidden: Vec<PathBuf>,
    /// Paths inside hidden folders that commands may read but not write, comma-separated:
    /// toolchains the commands need besides those found in the homes (`~/.cargo`, `~/.rustup`,
    /// `~/.pyenv`, `~/.local/bin`, `~/.nvm`, …, which are shown read-only by default).
    #[arg(long, env = "SANDBOX_READ_ONLY", value_delimiter = ',')]
    pub read_only: Vec<PathBuf>,
    /// Let commands see the homes (`/root`, `/home`, the server's own), the host's temporary
    /// folders and engine sockets: by default they are hidden. `--files-anywhere` implies it (a
    /// task's container, whose homes are the image's).
    #[arg(long, env = "SANDBOX_SHOW_HOMES")]
    pub show_homes: bool,
    /// File tools reach the whole file system, not just the workspace (which stays where
    /// relative paths and commands start, and what snapshots record): for a task's own
    /// container, which is then the boundary.
    #[arg(long, env = "SANDBOX_FILES_ANYWHERE")]
    pub files_anywhere: bool,
    /// Delete the token file once it is read, so no command can read it (a task's container,
    /// where Landlock cannot hide it without hiding its folder's later files too).
    #[arg(long, env = "SANDBOX_FORGET_TOKEN_FILE")]
    pub forget_token_file: bool,
    /// Once the server has read (and forgotten) its token, start this program as the process
    /// `entrypoint` (a JSON array of its words, e.g. an image's entrypoint and command): so a
    /// task's own entrypoint runs only after nothing of the server's is left for it to read.
    #[arg(long, env = "SANDBOX_ENTRYPOINT_PROCESS", value_name = "JSON")]
    pub entrypoint_process: Option<String>,
    /// Run commands as this user (`UID[:GID]`, or a user's name such as `nobody`) when the
    /// server is root. The workspace and root's `--writable` folders are mapped to that user in
    /// the commands' view (an idmapped mount), so the files on disk keep their owner.
    #[arg(long, env = "SANDBOX_RUN_AS")]
    pub run_as: Option<String>,
    /// Do not give commands a PID and mount namespace of their own (by default, where the host
    /// allows one, they see only the sandbox's processes in `/proc` and a `/dev` of their own).
    #[arg(long, env = "SANDBOX_NO_PID_NAMESPACE")]
    pub no_pid_namespace: bool,
    /// More environment variables commands may see, comma-separated (besides PATH, HOME, LANG,
    /// LC_*, TERM, TZ, USER, LOGNAME, SHELL); `*` for all of the server's but its own settings
    /// (`SANDBOX_*`, `OTEL_*`, `RUST_LOG`), as in a task's container whose variables are the
    /// image's and the task's.
    #[arg(long, env = "SANDBOX_ENV_ALLOW", value_delimiter = ',')]
    pub env_allow: Vec<String>,
    /// CPU seconds per command (RLIMIT_CPU); 0 is unlimited.
    #[arg(long, env = "SANDBOX_LIMIT_CPU_SECS", default_value_t = 3600)]
    pub limit_cpu_secs: u64,
    /// Address space per process (RLIMIT_AS), e.g. 8GiB; 0 is unlimited.
    #[arg(long, env = "SANDBOX_LIMIT_MEMORY", value_parser = size::parse_size, default_value = "8GiB")]
    pub limit_memory: u64,
    /// Largest file a command may write (RLIMIT_FSIZE), e.g. 8GiB; 0 is unlimited.
    #[arg(long, env = "SANDBOX_LIMIT_FILE_SIZE", value_parser = size::parse_size, default_value = "8GiB")]
    pub limit_file_size: u64,
    /// Processes of the commands' user (RLIMIT_NPROC; it does not bind root); 0 is unlimited.
    #[arg(long, env = "SANDBOX_LIMIT_PROCESSES", default_value_t = 4096)]
    pub limit_processes: u64,
    /// Open files per process (RLIMIT_NOFILE); 0 is unlimited.
    #[arg(long, env = "SANDBOX_LIMIT_OPEN_FILES", default_value_t = 4096)]
    pub limit_open_files: u64,
    /// Refuse to start when a protection cannot be applied.
    #[arg(long, env = "SANDBOX_REQUIRE_PROTECTIONS")]
    pub require_protections: bool,
    /// On SIGTERM or SIGINT, seconds that in-flight calls get to finish before they are killed.
    #[arg(long, env = "SANDBOX_SHUTDOWN_GRACE_SECS", default_value_t = 10)]
    pub shutdown_grace_secs: u64,
}

/// The validated configuration.
#[derive(Debug)]
pub struct Config {
    pub workspace: PathBuf,
    pub files_anywhere: bool,
    /// Started as the process `entrypoint` once the token is read (`--entrypoint-process`).
    pub entrypoint_process: Option<Vec<String>>,
    pub listen: SocketAddr,
    pub metrics_listen: Option<SocketAddr>,
    /// HTTPS on `listen` (the metrics address stays plain HTTP, for the cluster's scraper).
    pub tls: Option<TlsFiles>,
    /// The root token (`--token-file`) and the tokens minted with it.
    pub tokens: Arc<crate::tokens::Tokens>,
    /// Opened, with its writer running (`--audit-log`).
    pub audit: Option<crate::http::audit::AuditLog>,
    pub registry: Registry,
    pub output_limit: usize,
    pub artifact_cap: u64,
    pub artifact_retention: u64,
    pub state_dir: Option<PathBuf>,
    pub max_body_bytes: u64,
    pub max_inflight_body_bytes: u64,
    pub archive_max_bytes: u64,
    pub archive_max_entries: u64,
    pub scan_max_entries: u64,
    pub max_concurrent_calls: usize,
    pub max_followers: usize,
    pub process_buffer: u64,
    pub max_processes: usize,
    pub worker_threads: usize,
    pub snapshot_ignore: Vec<String>,
    pub watch: Vec<String>,
    /// From `--known-files`.
    pub known_files: Vec<sandbox_protocol::KnownFile>,
    pub blob_max_file_bytes: u64,
    pub confine: ConfineRequest,
    pub require_protections: bool,
    pub kill_grace: Duration,
    pub idempotency_ttl: Duration,
    pub durable_writes: bool,
    pub shutdown_grace: Duration,
}

/// A flag that does not make sense, named.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--workspace {path}: {why}")]
    Workspace { path: PathBuf, why: String },
    #[error("--token-file {path}: {why}")]
    TokenFile { path: PathBuf, why: String },
    #[error(
        "--listen {0}: refusing to listen on a non-loopback address without a token; pass --token-file"
    )]
    NoToken(SocketAddr),
    #[error("--tools: {0}")]
    Tools(String),
    #[error("--{flag}: {why}")]
    Range { flag: &'static str, why: String },
    #[error("--require-protections: {0}")]
    MissingProtections(String),
    #[error(transparent)]
    Tls(crate::http::tls::TlsError),
    #[error("{0}")]
    TokenStore(String),
}
