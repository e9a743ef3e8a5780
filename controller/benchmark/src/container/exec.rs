//! The task author's side of a task's container, outside the agent's sandbox and policy: files
//! uploaded (`/tests`, `/solution`), the verifier run (`docker exec`), its logs copied out.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Doing, Failed, IntoFailure, failed};
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::query_parameters::DownloadFromContainerOptionsBuilder;
use futures::StreamExt;
use harness_runtime::sandbox::docker::unpack;

use super::TaskEnvironment;

/// Output kept in memory from an exec; the rest is counted.
const EXEC_OUTPUT_CAP: usize = 1 << 20;

/// How an exec ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exec {
    /// `None` when it timed out (or the engine lost it).
    pub exit_code: Option<i64>,
    pub timed_out: bool,
    /// Standard output and error, merged, cut at 1 MiB.
    pub output: String,
    pub duration: Duration,
}

impl TaskEnvironment {
    /// Runs `bash -c script` in the main container as `user` (the image's own when `None`) from
    /// the working folder, with `env`, for at most `timeout`. Processes it leaves are ended
    /// with the container.
    pub async fn exec(
        &self,
        script: &str,
        env: &BTreeMap<String, String>,
        user: Option<&str>,
        timeout: Duration,
    ) -> Failed<Exec> {
        let started = Instant::now();
        let created = self
            .docker
            .create_exec(
                &self.main_id,
                CreateExecOptions {
                    cmd: Some(vec!["bash".to_owned(), "-c".to_owned(), script.to_owned()]),
                    env: Some(env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
                    // The task's user, else the image's own (not the agent's, if that differs).
                    user: Some(user.map_or_else(|| self.image_user.clone(), str::to_owned)),
                    working_dir: Some(self.workdir.clone()),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await
            .doing("creating an exec in the task's container")?;
        let StartExecResults::Attached { mut output, .. } = self
            .docker
            .start_exec(&created.id, None)
            .await
            .doing("starting an exec in the task's container")?
        else {
            failed!("the engine started the exec detached");
        };
        let mut text = Vec::new();
        let collect = async {
            while let Some(Ok(chunk)) = output.next().await {
                let bytes = chunk.into_bytes();
                let room = EXEC_OUTPUT_CAP.saturating_sub(text.len());
                text.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
        };
        let timed_out = tokio::time::timeout(timeout, collect).await.is_err();
        let exit_code = if timed_out {
            None
        } else {
            self.docker
                .inspect_exec(&created.id)
                .await
                .ok()
                .and_then(|i| i.exit_code)
        };
        Ok(Exec {
            exit_code,
            timed_out,
            output: String::from_utf8_lossy(&text).into_owned(),
            duration: started.elapsed(),
        })
    }

    /// Copies `from` (a folder, or only its file `only`) into `to` in the container, files
    /// executable as they are, scripts made executable. The folder or file must not itself be
    /// a link; links inside the folder are sent as links, never followed.
    pub async fn upload(&self, from: &Path, only: Option<&str>, to: &str) -> Failed<()> {
        let source = crate::paths::upload_source(from, only)
            .doing_with(|| format!("uploading {} to {to}", from.display()))?;
        let prefix = to.trim_matches('/');
        let mut builder = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_size(0);
        builder.append_data(&mut header, format!("{prefix}/"), std::io::empty())?;
        match only {
            Some(name) => {
                let bytes = std::fs::read(&source)
                    .doing_with(|| format!("reading {}", source.display()))?;
                let mut header = tar::Header::new_gnu();
                header.set_mode(0o755);
                header.set_size(bytes.len() as u64);
                builder.append_data(&mut header, format!("{prefix}/{name}"), bytes.as_slice())?;
            }
            None => {
                builder.follow_symlinks(false);
                builder
                    .append_dir_all(prefix, &source)
                    .doing_with(|| format!("packing {}", source.display()))?;
            }
        }
        let body = builder.into_inner()?;
        unpack(&self.docker, &self.main_id, "/", body)
            .await
            .doing_with(|| {
                format!(
                    "uploading {} to {to} in the task's container",
                    from.display()
                )
            })?;
        Ok(())
    }

    /// Copies the container's folder `from` into `to` on this machine: regular files and
    /// folders only (no links: the agent could have planted some), at most `max_bytes`.
    pub async fn download(&self, from: &str, to: &Path, max_bytes: u64) -> Failed<u64> {
        let Some(archive) = self.archive(from, max_bytes).await? else {
            return Ok(0);
        };
        std::fs::create_dir_all(to).doing_with(|| format!("creating {}", to.display()))?;
        let mut tar = tar::Archive::new(archive.as_slice());
        let mut written = 0;
        for entry in tar.entries()? {
            let mut entry = entry?;
            let kind = entry.header().entry_type();
            // Entries are `<last name of from>/…`; only plain names below it are kept.
            let path = entry.path()?.into_owned();
            let mut parts = path.components();
            parts.next();
            let inner: Vec<std::path::Component<'_>> = parts.collect();
            if inner.is_empty()
                || !inner
                    .iter()
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
            {
                continue;
            }
            let target: std::path::PathBuf = inner.iter().fold(to.to_owned(), |p, c| p.join(c));
            if kind.is_dir() {
                std::fs::create_dir_all(&target)?;
            } else if kind.is_file() {
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                let mut file = std::fs::File::create(&target)?;
                written += std::io::copy(&mut entry, &mut file)?;
            }
        }
        Ok(written)
    }
}

impl TaskEnvironment {
    /// A tar of the container's `path` as the engine gives it (links not followed), `None`
    /// when nothing is there; refused past `max_bytes`.
    pub async fn archive(&self, path: &str, max_bytes: u64) -> Failed<Option<Vec<u8>>> {
        let options = DownloadFromContainerOptionsBuilder::new()
            .path(path)
            .build();
        let mut stream = self
            .docker
            .download_from_container(&self.main_id, Some(options));
        let mut archive = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => return Ok(None),
                Err(err) => {
                    return Err(err.doing(format!("copying {path} out of the task's container")));
                }
            };
            if archive.len() as u64 + chunk.len() as u64 > max_bytes + (1 << 20) {
                failed!("{path} in the task's container is over {max_bytes} bytes");
            }
            archive.extend_from_slice(&chunk);
        }
        Ok(Some(archive))
    }

    /// Unpacks `tar` into the container's folder `parent`, owners and modes as they are in it.
    pub async fn restore(&self, parent: &str, tar: Vec<u8>) -> Failed<()> {
        unpack(&self.docker, &self.main_id, parent, tar)
            .await
            .doing_with(|| format!("restoring {parent} in the task's container"))
    }
}

impl crate::host::TaskHost for TaskEnvironment {
    fn exec<'a>(
        &'a self,
        script: &'a str,
        env: &'a BTreeMap<String, String>,
        user: Option<&'a str>,
        timeout: Duration,
    ) -> futures::future::BoxFuture<'a, Failed<Exec>> {
        Box::pin(TaskEnvironment::exec(self, script, env, user, timeout))
    }

    fn upload<'a>(
        &'a self,
        from: &'a Path,
        only: Option<&'a str>,
        to: &'a str,
    ) -> futures::future::BoxFuture<'a, Failed<()>> {
        Box::pin(TaskEnvironment::upload(self, from, only, to))
    }

    fn download<'a>(
        &'a self,
        from: &'a str,
        to: &'a Path,
        max_bytes: u64,
    ) -> futures::future::BoxFuture<'a, Failed<u64>> {
        Box::pin(TaskEnvironment::download(self, from, to, max_bytes))
    }

    fn set_network<'a>(
        &'a self,
        policy: &'a crate::NetworkPolicy,
    ) -> futures::future::BoxFuture<'a, Failed<()>> {
        Box::pin(TaskEnvironment::set_network(self, policy))
    }

    fn archive<'a>(
        &'a self,
        path: &'a str,
        max_bytes: u64,
    ) -> futures::future::BoxFuture<'a, Failed<Option<Vec<u8>>>> {
        Box::pin(TaskEnvironment::archive(self, path, max_bytes))
    }

    fn restore<'a>(
        &'a self,
        parent: &'a str,
        tar: Vec<u8>,
    ) -> futures::future::BoxFuture<'a, Failed<()>> {
        Box::pin(TaskEnvironment::restore(self, parent, tar))
    }

    fn end_processes(&self) -> futures::future::BoxFuture<'_, Failed<Vec<(u32, String)>>> {
        Box::pin(crate::host::end_processes(&self.client))
    }

    fn egress_decisions(&self) -> futures::future::BoxFuture<'_, Vec<harness_log::EgressRecord>> {
        Box::pin(self.egress_in_force())
    }

    fn changes(
        &self,
    ) -> futures::future::BoxFuture<'_, Failed<Option<crate::host::ContainerChanges>>> {
        Box::pin(async move {
            use bollard::models::ChangeType;
            use sandbox_protocol::ChangeKind;
            let changes = self
                .docker
                .container_changes(&self.main_id)
                .await
                .doing("listing the task container's changes")?
                .unwrap_or_default();
            Ok(Some(
                changes
                    .into_iter()
                    .map(|change| {
                        let kind = match change.kind {
                            ChangeType::_0 => ChangeKind::Modified,
                            ChangeType::_1 => ChangeKind::Added,
                            ChangeType::_2 => ChangeKind::Deleted,
                        };
                        (change.path, kind)
                    })
                    .collect(),
            ))
        })
    }
}
