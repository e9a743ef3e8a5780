//! The MCP servers file: Claude's `.mcp.json` shape (`{"mcpServers": {NAME: …}}`, JSON or YAML)
//! with a few keys of ours. Checked whole when loaded: a mistake names the server and the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::input::InputError;
use rmcp::transport::TokioChildProcess;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct File {
    mcp_servers: BTreeMap<String, Entry>,
    /// Past this many tokens of tool schemas, the model gets `mcp__tool_search` instead.
    tool_budget: Option<usize>,
}

/// One server as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    /// `stdio` (the default with `command`) or `http` (the default with `url`).
    #[serde(rename = "type")]
    kind: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// The child's working folder, relative to the file's.
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// `controller` (the default: started on the controller's machine) or `sandbox` (a stdio
    /// server run inside the sandbox, as a process of its API).
    #[serde(rename = "where")]
    place: Option<String>,
    /// Seconds to start and list the tools (30).
    start_timeout: Option<f64>,
    /// Seconds a call may take (120).
    call_timeout: Option<f64>,
    /// Only these tools (globs on the server's own names).
    allow: Option<Vec<String>>,
    /// Never these.
    #[serde(default)]
    deny: Vec<String>,
    /// Start only when a tool is first called, its tool list known from an earlier session.
    #[serde(default)]
    lazy: bool,
}

/// How a server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: PathBuf,
    },
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

/// One server, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    pub transport: Transport,
    pub start_timeout: Duration,
    pub call_timeout: Duration,
    pub allow: Option<Vec<String>>,
    pub deny: Vec<String>,
    pub lazy: bool,
    /// A stdio server run inside the sandbox instead of on the controller's machine.
    pub in_sandbox: bool,
}

impl ServerSpec {
    /// Whether the tool `name` (the server's own) is given to the model.
    pub fn exposes(&self, name: &str) -> bool {
        let hit = |globs: &[String]| {
            globs
                .iter()
                .any(|g| harness_log::text::glob_matches(g, name))
        };
        self.allow.as_deref().is_none_or(hit) && !hit(&self.deny)
    }
}

/// The servers of a session.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpConfig {
    pub servers: BTreeMap<String, ServerSpec>,
    /// Tokens of MCP tool schemas given to the model at most (about 4 characters a token);
    /// past it, one search tool finds and loads them on demand.
    pub tool_budget: usize,
}

/// The default `toolBudget`.
pub const DEFAULT_TOOL_BUDGET: usize = 10_000;

impl McpConfig {
    /// The values of the servers' environment and headers: secrets, for the log to redact.
    pub fn secret_values(&self) -> Vec<String> {
        self.servers
            .values()
            .flat_map(|server| match &server.transport {
                Transport::Stdio { env, .. } => env.values().cloned().collect::<Vec<_>>(),
                Transport::Http { headers, .. } => headers.values().cloned().collect(),
            })
            .collect()
    }

    /// Reads and checks a servers file.
    pub fn load(path: &Path) -> Result<McpConfig, InputError> {
        let text = std::fs::read_to_string(path).map_err(|err| {
            InputError(format!(
                "reading MCP servers file {}: {err}",
                path.display()
            ))
        })?;
        McpConfig::parse(&text, path)
    }

    /// The workspace's own `.mcp.json` (read through the sandbox API): its stdio servers run
    /// inside the sandbox, whatever the file says, since the workspace is not trusted to start
    /// programs on the controller's machine.
    pub fn from_workspace(text: &str) -> Result<McpConfig, InputError> {
        let mut config = McpConfig::parse(text, Path::new(".mcp.json"))?;
        for spec in config.servers.values_mut() {
            spec.in_sandbox |= matches!(spec.transport, Transport::Stdio { .. });
        }
        Ok(config)
    }

    /// Adds `other`'s servers; a name this config has already keeps its server. The names of
    /// those left out.
    pub fn merge(&mut self, other: McpConfig) -> Vec<String> {
        let mut clashes = Vec::new();
        for (name, spec) in other.servers {
            match self.servers.entry(name) {
                std::collections::btree_map::Entry::Occupied(taken) => {
                    clashes.push(taken.key().clone())
                }
                std::collections::btree_map::Entry::Vacant(free) => {
                    free.insert(spec);
                }
            }
        }
        if self.tool_budget == 0 {
            self.tool_budget = other.tool_budget;
        }
        clashes
    }

    fn parse(text: &str, path: &Path) -> Result<McpConfig, InputError> {
        let file: File = serde_norway::from_str(text)
            .map_err(|err| InputError(format!("MCP servers file {}: {err}", path.display())))?;
        let folder = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let servers: BTreeMap<String, ServerSpec> = file
            .mcp_servers
            .into_iter()
            .map(|(name, entry)| check(&name, entry, folder).map(|spec| (name, spec)))
            .collect::<Result<_, String>>()
            .map_err(|why| InputError(format!("MCP servers file {}: {why}", path.display())))?;
        let tool_budget = file.tool_budget.unwrap_or(DEFAULT_TOOL_BUDGET);
        Ok(McpConfig {
            servers,
            tool_budget,
        })
    }
}

fn seconds(value: Option<f64>, default: u64, key: &str) -> Result<Duration, String> {
    match value {
        None => Ok(Duration::from_secs(default)),
        Some(secs) if secs > 0.0 && secs <= 3600.0 => Ok(Duration::from_secs_f64(secs)),
        Some(secs) => Err(format!("`{key}` must be in (0, 3600] seconds, got {secs}")),
    }
}

fn check(name: &str, entry: Entry, folder: &Path) -> Result<ServerSpec, String> {
    let at = |why: String| format!("server {name}: {why}");
    if name.is_empty()
        || name.contains("__")
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(at(
            "a name is letters, digits, `-` and `_`, without `__`".to_owned()
        ));
    }
    let in_sandbox = match entry.place.as_deref() {
        None | Some("controller") => false,
        Some("sandbox") if entry.command.is_some() => true,
        Some("sandbox") => {
            return Err(at(
                "`where: sandbox` is for a stdio server (a `command`)".to_owned()
            ));
        }
        Some(other) => {
            return Err(at(format!(
                "`where: {other}`: expected controller or sandbox"
            )));
        }
    };
    let transport = match (entry.kind.as_deref(), entry.command, entry.url) {
        (None | Some("stdio"), Some(command), None) if !command.trim().is_empty() => {
            Transport::Stdio {
                command,
                args: entry.args,
                env: entry.env,
                cwd: folder.join(entry.cwd.unwrap_or_else(|| PathBuf::from("."))),
            }
        }
        (None | Some("http" | "streamable-http"), None, Some(url))
            if url.starts_with("http://") || url.starts_with("https://") =>
        {
            Transport::Http {
                url,
                headers: entry.headers,
            }
        }
        (Some(kind), _, _) if !["stdio", "http", "streamable-http"].contains(&kind) => {
            return Err(at(format!("`type: {kind}`: expected stdio or http")));
        }
        _ => {
            return Err(at(
                "give a `command` (stdio) or an http(s) `url`, one of them".to_owned(),
            ));
        }
    };
    Ok(ServerSpec {
        transport,
        start_timeout: seconds(entry.start_timeout, 30, "start_timeout").map_err(at)?,
        call_timeout: seconds(entry.call_timeout, 120, "call_timeout").map_err(at)?,
        allow: entry.allow,
        deny: entry.deny,
        lazy: entry.lazy,
        in_sandbox,
    })
}

/// A stdio server's child, in a process group of its own, its stderr to `log`.
pub(super) fn child(
    spec: &ServerSpec,
    log: &Path,
) -> Result<(TokioChildProcess, Option<u32>), String> {
    let Transport::Stdio {
        command,
        args,
        env,
        cwd,
    } = &spec.transport
    else {
        return Err("not a stdio server".to_owned());
    };
    // MCP servers are the operator's programs, started on the controller's machine.
    #[allow(clippy::disallowed_methods)]
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args).envs(env).current_dir(cwd).process_group(0);
    let stderr = std::fs::File::create(log)
        .map(Stdio::from)
        .unwrap_or_else(|_| Stdio::null());
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(stderr)
        .spawn()
        .map_err(|err| format!("could not start `{command}`: {err}"))?;
    let group = transport.id();
    Ok((transport, group))
}

/// A streamable HTTP server's transport configuration, with its headers.
pub(super) fn http(
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<StreamableHttpClientTransportConfig, String> {
    use reqwest::header::{HeaderName, HeaderValue};
    let mut custom = std::collections::HashMap::new();
    for (name, value) in headers {
        let key =
            HeaderName::try_from(name.as_str()).map_err(|err| format!("header {name}: {err}"))?;
        let value =
            HeaderValue::try_from(value.as_str()).map_err(|err| format!("header {name}: {err}"))?;
        custom.insert(key, value);
    }
    Ok(StreamableHttpClientTransportConfig::with_uri(url).custom_headers(custom))
}
