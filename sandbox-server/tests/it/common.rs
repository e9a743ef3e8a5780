use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

// Shared with the benches.
#[path = "../../benches/support/listing.rs"]
mod listing;

pub(crate) use listing::running;

pub const TOKEN: &str = "test-token-0123456789abcdef";

/// A running server over a temporary workspace; stopped with SIGTERM on drop.
pub struct Server {
    pub base: String,
    pub child: Child,
    pub workspace: tempfile::TempDir,
    pub token: Option<String>,
    pub client: reqwest::Client,
    /// The `--metrics-listen` address, when one was asked for.
    pub metrics: Option<String>,
    _token_dir: tempfile::TempDir,
    /// The server's log (its standard error), shown when a test fails while it runs.
    log: PathBuf,
}

#[derive(Default)]
pub struct Options {
    pub token: bool,
    pub extra_args: Vec<String>,
    /// Variables the server runs with, besides the test's own.
    pub env: Vec<(String, String)>,
    /// Run the server as this user and group (a root test's ordinary user), the workspace and
    /// the token folder given to it.
    pub user: Option<u32>,
}

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_sandbox-server"))
}

pub async fn start() -> Server {
    start_with(Options::default()).await
}

/// A server started with `args` after those of `serve`.
pub async fn start_with_args<S: Into<String>>(args: impl IntoIterator<Item = S>) -> Server {
    start_with(Options {
        extra_args: args.into_iter().map(Into::into).collect(),
        ..Options::default()
    })
    .await
}

/// A server that asks every `/v1` call for the bearer token `TOKEN`.
pub async fn start_with_token() -> Server {
    start_with_token_and_args(Vec::<String>::new()).await
}

/// A server that asks for the bearer token `TOKEN`, started with `args` after those of `serve`.
pub async fn start_with_token_and_args<S: Into<String>>(
    args: impl IntoIterator<Item = S>,
) -> Server {
    start_with(Options {
        token: true,
        extra_args: args.into_iter().map(Into::into).collect(),
        ..Options::default()
    })
    .await
}

pub async fn start_with(options: Options) -> Server {
    let workspace = tempfile::tempdir().unwrap();
    start_in(workspace, options).await
}

pub async fn start_in(workspace: tempfile::TempDir, options: Options) -> Server {
    let token_dir = tempfile::tempdir().unwrap();
    let mut command = testkit::serve(binary(), workspace.path());
    if let Some(user) = options.user {
        use std::os::unix::process::CommandExt;
        for folder in [workspace.path(), token_dir.path()] {
            std::os::unix::fs::chown(folder, Some(user), Some(user)).unwrap();
        }
        // std drops the supplementary groups of a root parent when it sets the user.
        command.uid(user).gid(user);
    }
    command
        .args(&options.extra_args)
        .envs(options.env.iter().map(|(k, v)| (k, v)))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    let log = token_dir.path().join("server.log");
    command.stderr(std::fs::File::create(&log).expect("create the server's log"));
    if let Some(user) = options.user {
        std::os::unix::fs::chown(&log, Some(user), Some(user)).unwrap();
    }
    let token = options.token.then(|| {
        let path = token_dir.path().join("token");
        std::fs::write(&path, format!("{TOKEN}\n")).unwrap();
        if let Some(user) = options.user {
            std::os::unix::fs::chown(&path, Some(user), Some(user)).unwrap();
        }
        command.arg("--token-file").arg(&path);
        TOKEN.to_owned()
    });
    let (child, line) = testkit::spawn_server(&mut command);
    Server {
        base: testkit::url_of(&line),
        child,
        workspace,
        token,
        client: reqwest::Client::new(),
        metrics: line["metrics"].as_str().map(str::to_owned),
        _token_dir: token_dir,
        log,
    }
}

/// Reads the `{"listening": ADDR}` line the server prints once bound.
pub fn read_address(child: &mut Child) -> String {
    testkit::bound_line(child)["listening"]
        .as_str()
        .expect("listening key")
        .to_owned()
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether a process that this server's commands see as `inner` (a pid they printed or
    /// wrote, in their PID namespace) is alive.
    pub fn alive(&self, inner: u32) -> bool {
        testkit::alive_in(self.pid(), inner)
    }

    /// The host pid of a live process that this server's commands see as `inner`.
    pub fn host_pid(&self, inner: u32) -> u32 {
        testkit::host_pid(self.pid(), inner).unwrap_or_else(|| {
            panic!("no live process of the server is pid {inner} to its commands")
        })
    }

    /// Where the token file is (it exists only when the server was started with a token).
    pub fn token_file(&self) -> PathBuf {
        self._token_dir.path().join("token")
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.workspace.path().join(relative)
    }

    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let builder = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    /// Sends a request without a body; returns the response, whatever its status.
    pub async fn send(&self, method: reqwest::Method, path: &str) -> reqwest::Response {
        self.request(method, path).send().await.unwrap()
    }

    /// Sends a `DELETE`; returns the status and the JSON body.
    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.request(reqwest::Method::DELETE, path).answer().await
    }

    /// Sends a `GET` with the header `name: value`; returns the response, whatever its status.
    pub async fn get_with(&self, path: &str, name: &str, value: &str) -> reqwest::Response {
        let request = self.request(reqwest::Method::GET, path).header(name, value);
        request.send().await.unwrap()
    }

    /// Calls a tool; returns the status and the JSON body.
    pub async fn call(&self, tool: &str, args: Value) -> (u16, Value) {
        let path = format!("/v1/tools/{tool}");
        self.request(reqwest::Method::POST, &path)
            .json(&args)
            .answer()
            .await
    }

    /// Calls a tool that must succeed.
    pub async fn ok(&self, tool: &str, args: Value) -> Value {
        let (status, body) = self.call(tool, args).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// The body of a `GET`, whatever its status.
    pub async fn get_bytes(&self, path: &str) -> Vec<u8> {
        let response = self.send(reqwest::Method::GET, path).await;
        response.bytes().await.unwrap().to_vec()
    }

    /// The body of a `GET` as text, whatever its status.
    pub async fn get_text(&self, path: &str) -> String {
        self.send(reqwest::Method::GET, path)
            .await
            .text()
            .await
            .unwrap()
    }

    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        self.request(reqwest::Method::GET, path).answer().await
    }

    /// Sends a `POST` without a body; returns the status and the JSON body.
    pub async fn post_json(&self, path: &str) -> (u16, Value) {
        self.request(reqwest::Method::POST, path).answer().await
    }

    /// Sends a `POST` without a body that must answer 200; returns the JSON body.
    pub async fn post_ok(&self, path: &str) -> Value {
        let (status, body) = self.post_json(path).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// The end of the server's log, and where it and every process below it wait: what a
    /// failed or stuck test shows.
    pub fn diagnosis(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(60)..].join("\n");
        format!(
            "the server's log (last {} of {} lines):\n{tail}\nits processes:\n{}",
            lines.len().min(60),
            lines.len(),
            testkit::stacks(self.pid())
        )
    }

    /// Sends SIGTERM and waits (bounded) for the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        signal(self.child.id(), "TERM");
        wait_exit(&mut self.child, Duration::from_secs(30)).expect("the server exits after SIGTERM")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            report(&self.diagnosis());
        }
        if let Ok(None) = self.child.try_wait() {
            signal(self.child.id(), "TERM");
            if wait_exit(&mut self.child, Duration::from_secs(15)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// A request sent and its answer read, as the tests do it.
pub trait Answer {
    /// Sends the request; returns the status and the JSON body.
    fn answer(self) -> impl std::future::Future<Output = (u16, Value)> + Send;

    /// Sends the request; returns the JSON body, whatever the status.
    fn json_body(self) -> impl std::future::Future<Output = Value> + Send;

    /// Sends the request; returns the status.
    fn status_code(self) -> impl std::future::Future<Output = u16> + Send;
}

impl Answer for reqwest::RequestBuilder {
    async fn answer(self) -> (u16, Value) {
        let response = self.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text).unwrap_or_else(|err| {
            panic!("status {status}, a body that is not JSON ({err}): {text}")
        });
        (status, body)
    }

    async fn json_body(self) -> Value {
        self.send().await.unwrap().json().await.unwrap()
    }

    async fn status_code(self) -> u16 {
        self.send().await.unwrap().status().as_u16()
    }
}

/// The message of an error body (`{"error": {"type": …, "message": …}}`).
pub fn error_message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap()
}

/// The strings under `a` and `b` of each object in the JSON array `array`.
pub fn string_pairs<'a>(array: &'a Value, a: &str, b: &str) -> Vec<(&'a str, &'a str)> {
    array
        .as_array()
        .unwrap()
        .iter()
        .map(|object| (object[a].as_str().unwrap(), object[b].as_str().unwrap()))
        .collect()
}

/// The element of the JSON array `array` whose `key` is `value`.
pub fn item<'a>(array: &'a Value, key: &str, value: &str) -> &'a Value {
    array
        .as_array()
        .unwrap()
        .iter()
        .find(|element| element[key] == value)
        .unwrap_or_else(|| panic!("no {key} {value} in {array}"))
}

/// The protection called `name` that `/v1/info` (or `/healthz`) lists.
pub fn protection<'a>(info: &'a Value, name: &str) -> &'a Value {
    item(&info["protections"], "name", name)
}

pub fn signal(pid: u32, name: &str) {
    Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
}

pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

pub use testkit::alive;

/// Polls (bounded) until `pid` is gone.
pub async fn gone_within(pid: u32, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

pub use testkit::rss_kib;

pub fn read_pid_file(path: &Path) -> u32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Shows what a failing test needs seen (the test harness captures it with the test's output).
#[allow(clippy::print_stderr)]
pub fn report(text: &str) {
    eprintln!("{text}");
}
