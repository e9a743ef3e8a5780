//! Where a task's author-side steps run (the verifier, the oracle's upload, the logs copied
//! out), outside the agent's policy: in containers this harness started (`docker exec` and
//! archive copies, [`super::container::TaskEnvironment`]), or through the API of a server
//! already running in the task's image, as in a Kubernetes pod whose task container runs the
//! injected server ([`ApiHost`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Doing, Failed, failed};
use futures::future::BoxFuture;
use sandbox_protocol::{BashArgs, EntryKind};

use super::container::Exec;
use harness_runtime::sandbox::SandboxClient;

/// A container's files changed against its image: each path, and how.
pub type ContainerChanges = Vec<(String, sandbox_protocol::ChangeKind)>;

/// The author-side operations on a task's main container.
pub trait TaskHost: Send + Sync {
    /// Runs `bash -c script` from the working folder with `env` (as `user` where the host can
    /// choose it) for at most `timeout`.
    fn exec<'a>(
        &'a self,
        script: &'a str,
        env: &'a BTreeMap<String, String>,
        user: Option<&'a str>,
        timeout: Duration,
    ) -> BoxFuture<'a, Failed<Exec>>;
    /// Copies the folder `from` (or only its file `only`) into `to` in the container.
    fn upload<'a>(
        &'a self,
        from: &'a Path,
        only: Option<&'a str>,
        to: &'a str,
    ) -> BoxFuture<'a, Failed<()>>;
    /// Copies the container's folder `from` into `to` here (plain files and folders only), at
    /// most `max_bytes`.
    fn download<'a>(
        &'a self,
        from: &'a str,
        to: &'a Path,
        max_bytes: u64,
    ) -> BoxFuture<'a, Failed<u64>>;
    /// Puts the task on the network a phase asks for before the phase starts; fails (closed)
    /// when it cannot be had here.
    fn set_network<'a>(&'a self, policy: &'a crate::NetworkPolicy) -> BoxFuture<'a, Failed<()>>;
    /// A tar of the container's `path` (its entries named from the path's last component on,
    /// as the engine gives them; links not followed), `None` when nothing is there; refused
    /// past `max_bytes`.
    fn archive<'a>(
        &'a self,
        path: &'a str,
        max_bytes: u64,
    ) -> BoxFuture<'a, Failed<Option<Vec<u8>>>>;
    /// Unpacks `tar` (from [`TaskHost::archive`]) into the container's folder `parent`.
    fn restore<'a>(&'a self, parent: &'a str, tar: Vec<u8>) -> BoxFuture<'a, Failed<()>>;
    /// Ends every process the agent's phase left (a call still running too) but the image's
    /// own entrypoint's; says which, with their command lines.
    fn end_processes(&self) -> BoxFuture<'_, Failed<Vec<(u32, String)>>>;
    /// What the task's egress proxy judged under the policy in force, by host (none without a
    /// proxy).
    fn egress_decisions(&self) -> BoxFuture<'_, Vec<harness_log::EgressRecord>>;
    /// The main container's files changed against its image, as its engine lists them; `None`
    /// where no engine can be asked (a pod reached through its server).
    fn changes(&self) -> BoxFuture<'_, Failed<Option<crate::host::ContainerChanges>>>;
}

/// `DELETE /v1/processes?include_running=true` on a task's server, as (pid, command) pairs.
pub(crate) async fn end_processes(client: &SandboxClient) -> Failed<Vec<(u32, String)>> {
    let ended = client
        .end_processes()
        .await
        .doing("ending the agent's processes through the task's sandbox")?;
    let mut commands = ended.commands.into_iter();
    Ok(ended
        .killed
        .into_iter()
        .map(|pid| (pid, commands.next().unwrap_or_default()))
        .collect())
}

/// A task's container reached through its server's API.
#[derive(Debug, Clone)]
pub struct ApiHost {
    pub client: SandboxClient,
}

/// `name` when it is one plain path component (not empty, `.` or `..`, without `/` or NUL): a
/// server's listing is the task's, and `../x` or `/x` joined to a folder here would write
/// anywhere.
fn plain_name(name: &str) -> Option<&str> {
    let plain = !matches!(name, "" | "." | "..") && !name.contains(['/', '\0']);
    plain.then_some(name)
}

/// The bash tool's longest timeout on a default server.
const MAX_CALL: Duration = Duration::from_secs(3600);

impl TaskHost for ApiHost {
    fn exec<'a>(
        &'a self,
        script: &'a str,
        env: &'a BTreeMap<String, String>,
        _user: Option<&'a str>,
        timeout: Duration,
    ) -> BoxFuture<'a, Failed<Exec>> {
        Box::pin(async move {
            let exports: Vec<String> = env
                .iter()
                .map(|(k, v)| format!("export {k}='{}'", v.replace('\'', r"'\''")))
                .collect();
            let started = Instant::now();
            let args = BashArgs {
                cmd: format!("{}\n{script}", exports.join("\n")),
                timeout: Some(timeout.clamp(Duration::from_secs(1), MAX_CALL).as_secs() as u32),
            };
            let result = self
                .client
                .bash(&args)
                .await
                .doing("running a command through the task's sandbox")?;
            Ok(Exec {
                exit_code: (!result.timed_out).then_some(i64::from(result.exit_code)),
                timed_out: result.timed_out,
                output: result.output,
                duration: started.elapsed(),
            })
        })
    }

    fn upload<'a>(
        &'a self,
        from: &'a Path,
        only: Option<&'a str>,
        to: &'a str,
    ) -> BoxFuture<'a, Failed<()>> {
        Box::pin(async move {
            // The folder or file is not itself a link; links inside are not sent.
            let source = crate::paths::upload_source(from, only)
                .doing_with(|| format!("uploading {} to {to}", from.display()))?;
            let files = match only {
                Some(name) => vec![(name.to_owned(), source)],
                None => crate::folder::files_of(&source)
                    .doing_with(|| format!("reading {}", source.display()))?,
            };
            for (rel, path) in files {
                let bytes =
                    std::fs::read(&path).doing_with(|| format!("reading {}", path.display()))?;
                let target = format!("{}/{rel}", to.trim_end_matches('/'));
                self.client
                    .put_file(&target, bytes, Some(0o755))
                    .await
                    .doing_with(|| format!("uploading {} to {target}", path.display()))?;
            }
            Ok(())
        })
    }

    fn download<'a>(
        &'a self,
        from: &'a str,
        to: &'a Path,
        max_bytes: u64,
    ) -> BoxFuture<'a, Failed<u64>> {
        Box::pin(async move {
            let mut written: u64 = 0;
            let mut pending = vec![(from.trim_end_matches('/').to_owned(), to.to_owned())];
            while let Some((remote, local)) = pending.pop() {
                let Some(listing) = self.client.list_dir(&remote).await? else {
                    continue;
                };
                std::fs::create_dir_all(&local)?;
                for entry in listing.entries {
                    let Some(name) = plain_name(&entry.name) else {
                        failed!(
                            "{remote} in the task's container lists an entry named {:?}, which is not a plain file name",
                            entry.name
                        );
                    };
                    let (path, target) = (format!("{remote}/{name}"), local.join(name));
                    match entry.kind {
                        EntryKind::Dir => pending.push((path, target)),
                        EntryKind::File => {
                            // The size is the container's word: added without overflow.
                            if written.saturating_add(entry.size) > max_bytes {
                                failed!("{from} in the task's container is over {max_bytes} bytes");
                            }
                            let room = (max_bytes - written) as usize;
                            if let Some(head) = self.client.get_file(&path, room).await? {
                                if head.truncated() {
                                    failed!(
                                        "{from} in the task's container is over {max_bytes} bytes"
                                    );
                                }
                                written += head.bytes.len() as u64;
                                std::fs::write(&target, head.bytes)?;
                            }
                        }
                        _ => {}
                    }
                }
            }
            Ok(written)
        })
    }

    /// The pod's network is its orchestrator's (deploy/'s NetworkPolicy keeps a task's pod
    /// offline but for the model's endpoint): an allow list cannot be enforced from here, so a
    /// phase that asks for one fails, closed.
    fn set_network<'a>(&'a self, policy: &'a crate::NetworkPolicy) -> BoxFuture<'a, Failed<()>> {
        Box::pin(async move {
            match policy {
                crate::NetworkPolicy::Allowlist(_) => failed!(
                    "the task asks for an allow list ({}), which a server already running in its image (a pod, --sandbox URL) cannot have: its network is the orchestrator's; run the task with --sandbox docker",
                    policy.describe()
                ),
                _ => Ok(()),
            }
        })
    }

    /// Walks `path` with the file API: folders and regular files (links and other kinds are
    /// listed as empty files of their kind's mode, not followed).
    fn archive<'a>(
        &'a self,
        path: &'a str,
        max_bytes: u64,
    ) -> BoxFuture<'a, Failed<Option<Vec<u8>>>> {
        Box::pin(async move {
            let path = path.trim_end_matches('/');
            let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
            let parent = if parent.is_empty() { "/" } else { parent };
            let mut builder = tar::Builder::new(Vec::new());
            let mut total = 0u64;
            let root_kind = match self.client.list_dir(path).await? {
                Some(_) => EntryKind::Dir,
                None => match self.client.get_file(path, 0).await? {
                    Some(_) => EntryKind::File,
                    None => return Ok(None),
                },
            };
            let mut pending = vec![(name.to_owned(), root_kind)];
            while let Some((rel, kind)) = pending.pop() {
                let remote = format!("{}/{rel}", parent.trim_end_matches('/'));
                let mut header = tar::Header::new_gnu();
                match kind {
                    EntryKind::Dir => {
                        header.set_entry_type(tar::EntryType::Directory);
                        header.set_mode(0o755);
                        header.set_size(0);
                        builder.append_data(&mut header, format!("{rel}/"), std::io::empty())?;
                        let listing = self.client.list_dir(&remote).await?.unwrap_or_else(|| {
                            sandbox_protocol::DirListing {
                                path: remote.clone(),
                                entries: Vec::new(),
                            }
                        });
                        for entry in listing.entries {
                            let Some(name) = plain_name(&entry.name) else {
                                failed!(
                                    "{remote} in the task's container lists an entry named {:?}, which is not a plain file name",
                                    entry.name
                                );
                            };
                            pending.push((format!("{rel}/{name}"), entry.kind));
                        }
                    }
                    EntryKind::File => {
                        let room = max_bytes.saturating_sub(total) as usize;
                        let Some(head) = self.client.get_file(&remote, room).await? else {
                            continue;
                        };
                        if head.truncated() {
                            failed!("{path} in the task's container is over {max_bytes} bytes");
                        }
                        total += head.bytes.len() as u64;
                        header.set_mode(0o644);
                        header.set_size(head.bytes.len() as u64);
                        builder.append_data(&mut header, &rel, head.bytes.as_slice())?;
                    }
                    _ => {
                        header.set_entry_type(tar::EntryType::Symlink);
                        header.set_size(0);
                        builder.append_link(&mut header, &rel, "?")?;
                    }
                }
            }
            Ok(Some(builder.into_inner()?))
        })
    }

    fn restore<'a>(&'a self, parent: &'a str, tar: Vec<u8>) -> BoxFuture<'a, Failed<()>> {
        Box::pin(async move {
            let mut archive = tar::Archive::new(tar.as_slice());
            let mut folders = Vec::new();
            let mut files = Vec::new();
            for entry in archive.entries()? {
                let mut entry = entry?;
                let rel = entry
                    .path()?
                    .to_string_lossy()
                    .trim_end_matches('/')
                    .to_owned();
                let target = format!("{}/{rel}", parent.trim_end_matches('/'));
                if entry.header().entry_type().is_dir() {
                    folders.push(target);
                } else if entry.header().entry_type().is_file() {
                    let mode = entry.header().mode().ok();
                    let mut bytes = Vec::new();
                    std::io::Read::read_to_end(&mut entry, &mut bytes)?;
                    files.push((target, bytes, mode));
                }
            }
            if !folders.is_empty() {
                let quoted: Vec<String> = folders
                    .iter()
                    .map(|f| format!("'{}'", f.replace('\'', r"'\''")))
                    .collect();
                let script = format!("mkdir -p -- {}", quoted.join(" "));
                self.exec(&script, &BTreeMap::new(), None, Duration::from_secs(60))
                    .await?;
            }
            for (target, bytes, mode) in files {
                self.client
                    .put_file(&target, bytes, mode)
                    .await
                    .doing_with(|| format!("restoring {target}"))?;
            }
            Ok(())
        })
    }

    fn end_processes(&self) -> BoxFuture<'_, Failed<Vec<(u32, String)>>> {
        Box::pin(end_processes(&self.client))
    }

    fn egress_decisions(&self) -> BoxFuture<'_, Vec<harness_log::EgressRecord>> {
        Box::pin(async { Vec::new() })
    }

    fn changes(&self) -> BoxFuture<'_, Failed<Option<crate::host::ContainerChanges>>> {
        Box::pin(async { Ok(None) })
    }
}

/// Runs a readiness check as Docker's HEALTHCHECK does: failures during the start period do
/// not count; after it, `retries` failures in a row fail it.
pub async fn healthcheck(
    host: &dyn TaskHost,
    check: &crate::Healthcheck,
    env: &BTreeMap<String, String>,
    user: Option<&str>,
) -> Failed<()> {
    let start_period_end = Instant::now() + check.start_period;
    let mut failures = 0;
    // Bounded: the start period, then `retries` failures.
    loop {
        let exec = host.exec(&check.command, env, user, check.timeout).await?;
        if exec.exit_code == Some(0) {
            return Ok(());
        }
        if Instant::now() < start_period_end {
            tokio::time::sleep(check.start_interval).await;
            continue;
        }
        failures += 1;
        if failures >= check.retries {
            let last = exec.output.trim();
            failed!(
                "the healthcheck failed {} times in a row: {}{}",
                check.retries,
                check.command,
                if last.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (last output: {})",
                        last.chars().take(400).collect::<String>()
                    )
                }
            );
        }
        tokio::time::sleep(check.interval).await;
    }
}
