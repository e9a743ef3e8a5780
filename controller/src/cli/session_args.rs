//! The flags of a session, shared by `run`, `batch` and `replay fork`: the model, the sandbox,
//! the policy, the log; the benchmark tasks' own; and how they become the library's
//! [`SessionFlags`].

use std::path::PathBuf;
use std::time::Duration;

use harness_runtime::config::SessionFlags;

use super::agents;

/// The flags a session takes, shared by `run` and `batch`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SessionArgs {
    /// PROVIDER/NAME: openai/… (Responses API), openai-compat/… (Chat Completions, needs
    /// --base-url), anthropic/… (Messages API), or script:FILE (a scripted model, no LLM).
    /// Default: openai/gpt-6-luna, as the seed.
    #[arg(long, env = "CONTROLLER_MODEL")]
    pub(crate) model: Option<String>,
    /// The model API's base URL, overriding OPENAI_BASE_URL / ANTHROPIC_BASE_URL.
    #[arg(long)]
    pub(crate) base_url: Option<String>,
    /// Reasoning effort for OpenAI models (minimal, low, medium, high); default low.
    #[arg(long)]
    pub(crate) reasoning_effort: Option<String>,
    /// Add the provider's built-in web search tool (OpenAI Responses). Billed separately from tokens.
    #[arg(long)]
    pub(crate) web_search: bool,
    /// Price as INPUT,OUTPUT[,CACHED_INPUT] in USD per million tokens, overriding the built-in table.
    #[arg(long, value_name = "PRICES")]
    pub(crate) price: Option<String>,
    /// Most model turns before stopping [default: 30].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_turns: Option<u32>,
    /// Stop before a turn once this much (USD) is spent [default: 1.00].
    #[arg(long)]
    pub(crate) max_cost: Option<f64>,
    /// Compact the history above this many estimated tokens [default: 100000].
    #[arg(long)]
    pub(crate) compact_at: Option<usize>,
    /// `local` (a sandbox-server child over the session's working directory), `docker` (a
    /// fresh container of --image per session, through the Docker Engine API) or the URL of a
    /// running server (`run` only); `batch` also takes `pool:URL,URL…` (running servers, one
    /// leased per task).
    #[arg(long, value_name = "local|docker|URL|pool:URLS")]
    pub(crate) sandbox: Option<String>,
    /// `--sandbox docker`: the sandbox image [default: $HARNESS_SANDBOX_IMAGE, else
    /// agent-harness/sandbox; docker/README.md builds it].
    #[arg(long)]
    pub(crate) image: Option<String>,
    /// `--sandbox docker`: the container's memory (no swap beyond it), e.g. `2g`.
    #[arg(long, value_name = "SIZE")]
    pub(crate) memory: Option<String>,
    /// `--sandbox docker`: the container's CPUs, e.g. `1.5`.
    #[arg(long)]
    pub(crate) cpus: Option<f64>,
    /// `--sandbox docker`: the most processes and threads in the container.
    #[arg(long)]
    pub(crate) pids: Option<i64>,
    /// The longest the session may run (wall clock, e.g. `30m`), any sandbox; a container
    /// past it is also removed by `harness sandboxes prune`.
    #[arg(long, value_name = "DURATION")]
    pub(crate) lifetime: Option<humantime::Duration>,
    /// The bearer token of a --sandbox URL, in a file.
    #[arg(long, value_name = "FILE")]
    pub(crate) sandbox_token_file: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) sandbox_tls: SandboxTlsArgs,
    /// A local sandbox's network: `none` (commands may open only Unix sockets) or `host`.
    /// Default `none`, or the task file's `network`.
    #[arg(long, value_name = "none|host")]
    pub(crate) network: Option<String>,
    /// More paths a local sandbox's commands may write beneath (they may write only in the
    /// workspace and a private TMPDIR otherwise), comma-separated, e.g. `~/.cargo,~/.cache`.
    #[arg(long, value_delimiter = ',', value_name = "PATHS")]
    pub(crate) writable: Vec<PathBuf>,
    /// Who a local sandbox's commands run as: `root`, a user's name or `UID[:GID]`. When
    /// harness runs as root the default is `nobody`, who cannot read root's files (the
    /// workspace is made theirs in the commands' view); otherwise harness's own user.
    #[arg(long, value_name = "USER")]
    pub(crate) run_as: Option<String>,
    /// Keep the temporary folder a `--task` with a workspace source is copied into when no
    /// working directory is given (it is removed when the session ends otherwise).
    #[arg(long)]
    pub(crate) keep_workspace: bool,
    /// The tools to give the model, comma-separated; all that the sandbox offers when absent.
    #[arg(long, value_delimiter = ',')]
    pub(crate) tools: Option<Vec<String>>,
    /// `FILE` (YAML: `deny`, `ask`, `allow` pattern lists, checked before the built-in rules
    /// unless it sets `defaults: false`), or `allow-all` for disposable, isolated experiments.
    #[arg(long, value_name = "FILE|allow-all")]
    pub(crate) policy: Option<String>,
    /// A hooks file (YAML): programs or URLs that see every tool call, prompt, compaction and
    /// stop, and may deny, ask, rewrite or add context (docs/hooks.md).
    #[arg(long, value_name = "FILE")]
    pub(crate) hooks: Option<PathBuf>,
    /// An MCP servers file (Claude's `.mcp.json` shape, JSON or YAML): their tools reach the
    /// model as `mcp__<server>__<tool>`, through the same hooks, policy and log (docs/mcp.md).
    #[arg(long, value_name = "FILE")]
    pub(crate) mcp: Option<PathBuf>,
    /// Also the MCP servers of the workspace's own `.mcp.json` (read through the sandbox API;
    /// its stdio servers run inside the sandbox). Off unless asked for.
    #[arg(long)]
    pub(crate) mcp_workspace: bool,
    /// The model that scores risk for calls no rule covers; the run's model when absent.
    #[arg(long, value_name = "PROVIDER/NAME")]
    pub(crate) classifier_model: Option<String>,
    /// Seconds the classifier may take for one call (retries included) before the call is asked.
    #[arg(long, default_value_t = 60)]
    pub(crate) classifier_timeout: u64,
    /// Decide by rules only: a call no rule covers is asked.
    #[arg(long)]
    pub(crate) no_classifier: bool,
    /// What happens to a call the policy asks about: `ask` the person at the terminal (no
    /// terminal means no; a batch has nobody to ask, so there it is `never`), `never` approve,
    /// or approve `auto`matically (unattended: the ask rules and the classifier then stop
    /// nothing; only for disposable sandboxes).
    #[arg(long, value_enum, default_value = "ask")]
    pub(crate) approve: ApproveArg,
    /// Where session logs go: each session is a folder `<log-dir>/<session-id>/`. It may not
    /// lie inside a local sandbox's workspace or a --writable path (the agent's commands could
    /// replace what the harness writes there): such a session is refused, named.
    #[arg(long, env = "CONTROLLER_LOG_DIR", default_value = "runs")]
    pub(crate) log_dir: PathBuf,
    /// `durable` syncs every event to disk before the step goes on; `relaxed` leaves it to the OS
    /// until the end (a machine crash may lose the last events, a killed harness does not).
    #[arg(long, value_enum, default_value = "durable")]
    pub(crate) log_durability: DurabilityArg,
    /// Anthropic: the most tokens per reply [default: 8192].
    #[arg(long)]
    pub(crate) max_tokens: Option<u32>,
    /// Anthropic: enable extended thinking with this many budget tokens.
    #[arg(long)]
    pub(crate) thinking_budget: Option<u32>,
    #[command(flatten)]
    pub(crate) agents: agents::AgentArgs,
    #[command(flatten)]
    pub(crate) bench: BenchArgs,
}

/// The flags of benchmark tasks (Harbor and Terminal-Bench folders).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Benchmark tasks (Harbor, Terminal-Bench 1)")]
pub(crate) struct BenchArgs {
    /// Who acts: `model` (the loop), `oracle` (the task's solution script, through the bash
    /// tool and the policy) or `nop` (nothing: a task that passes anyway is broken).
    #[arg(long, value_name = "model|oracle|nop")]
    pub(crate) agent: Option<String>,
    /// The reward at or above which a trial passes [default: 1].
    #[arg(long, value_name = "REWARD")]
    pub(crate) pass_threshold: Option<f64>,
    #[command(flatten)]
    pub(crate) build: BuildArgs,
    /// The agent's time, overriding the task's (e.g. `15m`).
    #[arg(long, value_name = "DURATION")]
    pub(crate) agent_timeout: Option<humantime::Duration>,
    /// The verifier's time, overriding the task's.
    #[arg(long, value_name = "DURATION")]
    pub(crate) verifier_timeout: Option<humantime::Duration>,
    /// Host variables a task may read, comma-separated names (its compose file's and env
    /// tables' `${VAR}`, build arguments): by default it reads none of this machine's.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub(crate) task_env: Vec<String>,
    /// The Docker network a task's containers reach the internet through in a public phase,
    /// and its egress proxy in an allow-list phase [default: bridge, the engine's own].
    #[arg(long, value_name = "NETWORK")]
    pub(crate) task_internet: Option<String>,
}

/// How a benchmark task's images are built.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct BuildArgs {
    /// Replace an image in `FROM` lines and compose `image:` (`FROM=TO`; a FROM ending in `/`
    /// replaces that prefix), for registries the engine cannot reach; repeatable.
    #[arg(long, value_name = "FROM=TO")]
    pub(crate) image_map: Vec<String>,
    /// A file of `FROM=TO` lines (`#` comments), as --image-map.
    #[arg(long, value_name = "FILE")]
    pub(crate) image_map_file: Option<PathBuf>,
    /// A CA bundle (PEM) added to every image build, for `RUN pip/curl` behind a
    /// TLS-inspecting proxy, e.g. /etc/ssl/certs/ca-certificates.crt.
    #[arg(long, value_name = "FILE")]
    pub(crate) build_ca: Option<PathBuf>,
}

impl BuildArgs {
    /// The build flags alone, as the benchmark adapter takes them.
    pub(crate) fn flags(&self) -> harness_benchmark::flags::TrialFlags {
        harness_benchmark::flags::TrialFlags {
            image_map: self.image_map.clone(),
            image_map_file: self.image_map_file.clone(),
            build_ca: self.build_ca.clone(),
            ..Default::default()
        }
    }
}

impl BenchArgs {
    pub(crate) fn flags(&self) -> harness_benchmark::flags::TrialFlags {
        harness_benchmark::flags::TrialFlags {
            agent: self.agent.clone(),
            pass_threshold: self.pass_threshold,
            image_map: self.build.image_map.clone(),
            image_map_file: self.build.image_map_file.clone(),
            build_ca: self.build.build_ca.clone(),
            agent_timeout: self.agent_timeout.map(Into::into),
            verifier_timeout: self.verifier_timeout.map(Into::into),
            task_env: self.task_env.clone(),
            task_internet: self.task_internet.clone(),
        }
    }
}

/// `--approve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ApproveArg {
    /// Never approve: every ask is a no.
    Never,
    /// Ask the person at the terminal; without one, the answer is no (the default).
    Ask,
    /// Approve every ask without a person. Only for disposable, isolated sandboxes: the
    /// classifier and the rules' ask list then stop nothing.
    Auto,
}

/// `--log-durability`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DurabilityArg {
    /// fsync every write before the harness goes on (default): nothing recorded is lost.
    Durable,
    /// Write to the OS at once, fsync at the end: a crash of the process loses nothing, a crash
    /// of the machine may lose the last events.
    Relaxed,
}

impl From<ApproveArg> for harness_policy::Approve {
    fn from(arg: ApproveArg) -> Self {
        match arg {
            ApproveArg::Never => harness_policy::Approve::Never,
            ApproveArg::Ask => harness_policy::Approve::Ask,
            ApproveArg::Auto => harness_policy::Approve::Auto,
        }
    }
}

impl From<DurabilityArg> for harness_log::Durability {
    fn from(arg: DurabilityArg) -> Self {
        match arg {
            DurabilityArg::Durable => harness_log::Durability::Durable,
            DurabilityArg::Relaxed => harness_log::Durability::Relaxed,
        }
    }
}

impl SessionArgs {
    /// The flags as the library takes them.
    pub(crate) fn flags(&self) -> SessionFlags {
        SessionFlags {
            model: self.model.clone(),
            base_url: self.base_url.clone(),
            reasoning_effort: self.reasoning_effort.clone(),
            web_search: self.web_search,
            price: self.price.clone(),
            max_turns: self.max_turns,
            max_cost: self.max_cost,
            compact_at: self.compact_at,
            sandbox: self.sandbox.clone(),
            image: self.image.clone(),
            memory: self.memory.clone(),
            cpus: self.cpus,
            pids: self.pids,
            lifetime: self.lifetime.map(Into::into),
            sandbox_token_file: self.sandbox_token_file.clone(),
            sandbox_tls: self.sandbox_tls.client_tls(),
            network: self.network.clone(),
            writable: self.writable.clone(),
            run_as: self.run_as.clone(),
            keep_workspace: self.keep_workspace,
            tools: self.tools.clone(),
            policy: self.policy.clone(),
            hooks: self.hooks.clone(),
            mcp: self.mcp.clone(),
            mcp_workspace: self.mcp_workspace,
            classifier_model: self.classifier_model.clone(),
            classifier_timeout: Duration::from_secs(self.classifier_timeout),
            no_classifier: self.no_classifier,
            approve: self.approve.into(),
            max_tokens: self.max_tokens,
            thinking_budget: self.thinking_budget,
            agents: self.agents.flags(),
        }
    }

    /// The flags only benchmark tasks take, as the benchmark adapter takes them.
    pub(crate) fn trial(&self) -> harness_benchmark::flags::TrialFlags {
        self.bench.flags()
    }
}

/// The TLS of a `--sandbox https://…` URL.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct SandboxTlsArgs {
    /// PEM certificates of the CA that issued the sandbox's certificate, trusted besides the
    /// system's store.
    #[arg(long, value_name = "FILE")]
    pub(crate) sandbox_ca: Option<PathBuf>,
    /// A client certificate (PEM) for a sandbox that requires one (mutual TLS); with
    /// --sandbox-client-key.
    #[arg(long, value_name = "FILE", requires = "sandbox_client_key")]
    pub(crate) sandbox_client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "sandbox_client_cert")]
    pub(crate) sandbox_client_key: Option<PathBuf>,
}

impl SandboxTlsArgs {
    pub(crate) fn client_tls(&self) -> harness_runtime::sandbox::ClientTls {
        harness_runtime::sandbox::ClientTls {
            ca: self.sandbox_ca.clone(),
            client_cert: self.sandbox_client_cert.clone(),
            client_key: self.sandbox_client_key.clone(),
        }
    }
}
