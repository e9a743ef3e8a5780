//! A fork's container image: the workspace at the step committed once into an image layer, so
//! that a fork's K container children start from it copy-on-write — no archive unpacked and no
//! file hashed per child.
//!
//! It is made from the children's own image in two commits. A created (never started)
//! container gets the workspace through the engine's put-archive, its files owned by the
//! image's user, and is committed. A container of that image then runs `sandbox-server
//! known-files`, which stats every file as every container of the image sees it (a layer's
//! files show the same inode and times in all of them, and nobody outside a container can know
//! them), and is committed in turn: the children's servers start with `--known-files`, so their
//! first snapshot reads none of the files. Neither container ever runs a command of the
//! workspace, and neither holds a token.
//!
//! Only an image whose workspace folder is empty can take a workspace this way (put-archive
//! adds files; it never removes those an image already has there), and only one whose user is
//! numeric (the files must be that user's, and the engine resolves only names it can look up):
//! otherwise [`ForkImageError::Unsuitable`] says why, and the fork uploads the workspace into
//! each child instead.

use std::collections::HashMap;
use std::path::Path;

use bollard::Docker;
use bollard::models::{ContainerConfig, ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CommitContainerOptionsBuilder, DownloadFromContainerOptionsBuilder, LogsOptionsBuilder,
    RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder, UploadToContainerOptionsBuilder,
    WaitContainerOptionsBuilder,
};
use futures::StreamExt;

use super::{Doing, Failure, IntoFailure};

/// Where the children's servers find their `--known-files` list in a fork's image.
pub const KNOWN_FILES: &str = "/var/lib/agent-harness/known-files.jsonl";
/// The folder it is made in (the image user's).
const FOLDER: &str = "var/lib/agent-harness";
/// On a fork's image: the workspace at which step of which session it holds.
pub const LABEL_FORK_STATE: &str = "agent-harness.fork-state";
/// On a fork's image kept for the next fork (`--keep-state`): `prune` leaves it without `--all`.
pub const LABEL_KEPT: &str = "agent-harness.fork-state.kept";

/// What a fork's image is made from: the children's image as the engine describes it.
#[derive(Debug, Clone)]
pub struct BaseImage {
    /// The image's id (its content, not its name).
    pub id: String,
    /// The folder its server serves (`SANDBOX_WORKSPACE`, else its working directory).
    pub workspace: String,
    /// Its user, who owns the workspace's files.
    pub uid: u32,
    pub gid: u32,
    /// Its `sandbox-server` (the entrypoint's program), when its entrypoint is one.
    server: Option<String>,
    /// Its entrypoint and command, which the fork's image keeps (a commit would take the
    /// listing container's own).
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
}

/// A fork's image, ready for children.
#[derive(Debug, Clone)]
pub struct ForkImage {
    pub tag: String,
    /// The `--known-files` list in it, when it has one.
    pub known_files: Option<String>,
    /// Whether it was already there (a kept fork's) rather than made now.
    pub reused: bool,
    /// A reused image's holder: a container of it, created and never started, labelled as
    /// this process's, so that neither `sandboxes prune` nor the fork that made the image
    /// removes it while this fork needs it. [`release`] removes it.
    pub holder: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ForkImageError {
    /// The image cannot hold the workspace this way; the children get it uploaded instead.
    #[error("{0}")]
    Unsuitable(String),
    #[error(transparent)]
    Failed(#[from] Failure),
}

/// Reads what a fork's image needs from `image`.
pub async fn base(image: &str) -> Result<BaseImage, ForkImageError> {
    let docker = super::connect().await?;
    let inspect = docker
        .inspect_image(image)
        .await
        .doing_with(|| format!("inspecting the image `{image}`"))?;
    let config = inspect.config.unwrap_or_default();
    let env = config.env.unwrap_or_default();
    let workspace = env
        .iter()
        .find_map(|pair| pair.strip_prefix("SANDBOX_WORKSPACE="))
        .map(str::to_owned)
        .or(config.working_dir)
        .filter(|dir| dir.starts_with('/') && dir != "/")
        .ok_or_else(|| {
            ForkImageError::Unsuitable(format!(
                "the image `{image}` names no workspace folder (SANDBOX_WORKSPACE or WORKDIR)"
            ))
        })?;
    let user = config.user.unwrap_or_default();
    let number = |part: &str| part.parse::<u32>().ok();
    let (uid, gid) = match user.split_once(':') {
        _ if user.is_empty() => Some((0, 0)),
        Some((uid, gid)) => number(uid).zip(number(gid)),
        None => number(&user).map(|uid| (uid, uid)),
    }
    .ok_or_else(|| {
        ForkImageError::Unsuitable(format!(
            "the image `{image}` runs as `{user}`, not a numeric UID:GID the files can be given"
        ))
    })?;
    let server = config
        .entrypoint
        .as_ref()
        .and_then(|entry| entry.first().cloned())
        .filter(|program| program.ends_with("/sandbox-server"));
    Ok(BaseImage {
        id: inspect
            .id
            .ok_or_else(|| Failure::Server(format!("the engine gave no id for `{image}`")))?,
        workspace,
        uid,
        gid,
        server,
        entrypoint: config.entrypoint,
        cmd: config.cmd,
    })
}

/// The image `tag` when it is a fork's image the engine still has (a kept fork's, or one a
/// killed fork left), held for this process (see [`ForkImage::holder`]) by the fork `session`.
pub async fn existing(tag: &str, session: &str) -> Result<Option<ForkImage>, Failure> {
    let docker = super::connect().await?;
    let labels = match docker.inspect_image(tag).await {
        Ok(inspect) => inspect
            .config
            .and_then(|config| config.labels)
            .unwrap_or_default(),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => return Ok(None),
        Err(err) => {
            return Err(IntoFailure::doing(
                err,
                format!("inspecting the image `{tag}`"),
            ));
        }
    };
    if !labels.contains_key(LABEL_FORK_STATE) {
        return Ok(None);
    }
    let holder =
        match Container::create(&docker, tag, None, &super::labels_for(session, None)).await {
            Ok(holder) => holder.id,
            // Removed since it was inspected: made anew.
            Err(Failure::Engine {
                source:
                    bollard::errors::Error::DockerResponseServerError {
                        status_code: 404, ..
                    },
                ..
            }) => return Ok(None),
            Err(failure) => return Err(failure.after("holding the fork's image")),
        };
    let known = labels.get(KNOWN_LABEL).is_some_and(|n| n != "0");
    Ok(Some(ForkImage {
        tag: tag.to_owned(),
        known_files: known.then(|| KNOWN_FILES.to_owned()),
        reused: true,
        holder: Some(holder),
    }))
}

/// Lets go of a reused image (removes its holder); nothing for an image made now.
pub async fn release(image: &ForkImage) {
    let (Some(holder), Ok(docker)) = (&image.holder, super::connect().await) else {
        return;
    };
    let container = Container {
        docker,
        id: holder.clone(),
    };
    container.remove().await;
}

/// The longest `sandbox-server known-files` may take in the image.
const LISTING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// How many files the image's list names.
const KNOWN_LABEL: &str = "agent-harness.fork-state.known";

/// Makes the image `tag` from `base`: `archive` (a tar of the workspace, its entries relative
/// and owned by the image's user) unpacked into the workspace folder, and the `--known-files`
/// list made in it from `hashes` (JSON Lines of `KnownFile`, stat fields not read). `what`
/// labels the image (which step of which session); `keep` marks it kept for the next fork.
/// Every container it makes is removed.
pub async fn make(
    base: &BaseImage,
    tag: &str,
    what: &str,
    archive: &Path,
    hashes: Vec<u8>,
    session_id: &str,
    keep: bool,
) -> Result<ForkImage, ForkImageError> {
    let docker = super::connect().await?;
    let mut labels = super::labels_for(session_id, None);
    labels.insert(LABEL_FORK_STATE.to_owned(), what.to_owned());
    if keep {
        labels.insert(LABEL_KEPT.to_owned(), "true".to_owned());
    }
    // The workspace, in a container that never starts.
    let holder = Container::create(&docker, &base.id, None, &labels).await?;
    let filled = async {
        if !workspace_is_empty(&docker, &holder.id, &base.workspace).await? {
            return Err(ForkImageError::Unsuitable(format!(
                "the image's workspace {} is not empty, and an archive cannot remove what is there",
                base.workspace
            )));
        }
        let file = tokio::fs::File::open(archive)
            .await
            .doing_with(|| format!("opening {}", archive.display()))?;
        let body = tokio_util::io::ReaderStream::new(file);
        docker
            .upload_to_container(
                &holder.id,
                Some(
                    UploadToContainerOptionsBuilder::new()
                        .path(&base.workspace)
                        .build(),
                ),
                bollard::body_try_stream(body),
            )
            .await
            .doing("unpacking the workspace at the step into the fork's image")?;
        Ok::<_, ForkImageError>(commit(&docker, &holder.id, None, &labels, base).await?)
    }
    .await;
    holder.remove().await;
    let filled = filled?;
    let (repo, version) = tag.rsplit_once(':').unwrap_or((tag, "latest"));
    let Some(server) = &base.server else {
        // No server to stat the files with: the children hash them (still nothing unpacked).
        let relabelled = async {
            let relabel = Container::create(&docker, &filled, None, &labels).await?;
            let mut labels = labels.clone();
            labels.insert(KNOWN_LABEL.to_owned(), "0".to_owned());
            let done = commit(&docker, &relabel.id, Some((repo, version)), &labels, base).await;
            relabel.remove().await;
            done
        }
        .await;
        if relabelled.is_err() {
            remove(&filled).await;
        }
        relabelled?;
        return Ok(ForkImage {
            tag: tag.to_owned(),
            known_files: None,
            reused: false,
            holder: None,
        });
    };
    // The list, made inside an image of the workspace, then committed over it; the first
    // commit is its parent layer, so removing the tag later removes both.
    let stamper = Container::create(
        &docker,
        &filled,
        Some((
            server,
            vec![
                "known-files".to_owned(),
                "--workspace".to_owned(),
                base.workspace.clone(),
                "--hashes".to_owned(),
                format!("/{FOLDER}/hashes.jsonl"),
                "--out".to_owned(),
                KNOWN_FILES.to_owned(),
            ],
        )),
        &labels,
    )
    .await;
    let stamper = match stamper {
        Ok(stamper) => stamper,
        Err(err) => {
            remove(&filled).await;
            return Err(err.into());
        }
    };
    let listed = async {
        let input =
            hashes_archive(&hashes, base.uid, base.gid).doing("packing the workspace's hashes")?;
        super::unpack(&docker, &stamper.id, "/", input)
            .await
            .doing("uploading the workspace's hashes")?;
        docker
            .start_container(&stamper.id, None)
            .await
            .doing("starting the container that lists the known files")?;
        let named = stamper.wait_output(&docker).await?;
        let mut labels = labels.clone();
        labels.insert(KNOWN_LABEL.to_owned(), named.to_string());
        commit(&docker, &stamper.id, Some((repo, version)), &labels, base).await?;
        Ok::<_, Failure>(named)
    }
    .await;
    stamper.remove().await;
    if listed.is_err() {
        // The workspace's layer alone, untagged: nothing else would remove it.
        remove(&filled).await;
    }
    let named = listed?;
    Ok(ForkImage {
        tag: tag.to_owned(),
        known_files: (named > 0).then(|| KNOWN_FILES.to_owned()),
        reused: false,
        holder: None,
    })
}

/// Removes a fork's image, by tag or id (its children's containers are gone).
pub async fn remove(tag: &str) {
    let Ok(docker) = super::connect().await else {
        return;
    };
    let options = RemoveImageOptionsBuilder::new().build();
    match docker.remove_image(tag, Some(options), None).await {
        Ok(_) => {}
        // Another fork of the same step holds it: that fork, or a later prune, removes it.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        }) => tracing::debug!("the fork's image {tag} is held by another fork; left to it"),
        Err(err) => {
            tracing::warn!(
                "could not remove the fork's image {tag} ({err}): `docker rmi {tag}` will"
            )
        }
    }
}

/// Commits a container into an image (named when `name` is given) with `base`'s entrypoint
/// and command; returns the image's id.
async fn commit(
    docker: &Docker,
    container: &str,
    name: Option<(&str, &str)>,
    labels: &HashMap<String, String>,
    base: &BaseImage,
) -> Result<String, Failure> {
    let mut options = CommitContainerOptionsBuilder::new().container(container);
    if let Some((repo, tag)) = name {
        options = options.repo(repo).tag(tag);
    }
    let config = ContainerConfig {
        labels: Some(labels.clone()),
        entrypoint: base.entrypoint.clone(),
        cmd: base.cmd.clone(),
        ..Default::default()
    };
    let made = docker
        .commit_container(options.build(), config)
        .await
        .doing("committing the fork's image")?;
    Ok(made.id)
}

/// Whether `folder` in the container holds nothing (its archive is the folder alone).
async fn workspace_is_empty(docker: &Docker, id: &str, folder: &str) -> Result<bool, Failure> {
    // A folder's own entry is a header block and the end: far below this, and a folder with
    // anything in it shows a second header.
    const ENOUGH: usize = 64 * 1024;
    let mut stream = docker.download_from_container(
        id,
        Some(
            DownloadFromContainerOptionsBuilder::new()
                .path(folder)
                .build(),
        ),
    );
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.doing_with(|| format!("reading the image's {folder}"))?;
        bytes.extend_from_slice(&chunk);
        if bytes.len() > ENOUGH {
            return Ok(false);
        }
    }
    let mut archive = tar::Archive::new(bytes.as_slice());
    let entries = archive
        .entries()
        .doing_with(|| format!("reading the image's {folder}"))?;
    Ok(entries.count() <= 1)
}

/// The hashes' file, in a folder of its own, both the image user's.
fn hashes_archive(hashes: &[u8], uid: u32, gid: u32) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut parts = String::new();
    for part in FOLDER.split('/') {
        parts.push_str(part);
        parts.push('/');
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        // The last folder is the image user's: the list is written there.
        let own = parts.trim_end_matches('/') == FOLDER;
        header.set_mode(if own { 0o700 } else { 0o755 });
        let (u, g) = if own { (uid, gid) } else { (0, 0) };
        header.set_uid(u.into());
        header.set_gid(g.into());
        header.set_size(0);
        header.set_mtime(mtime);
        builder.append_data(&mut header, &parts, std::io::empty())?;
    }
    let mut header = tar::Header::new_gnu();
    header.set_mode(0o600);
    header.set_uid(uid.into());
    header.set_gid(gid.into());
    header.set_size(hashes.len() as u64);
    header.set_mtime(mtime);
    builder.append_data(&mut header, format!("{FOLDER}/hashes.jsonl"), hashes)?;
    builder.into_inner()
}

/// A helper container, removed by [`Container::remove`].
struct Container {
    docker: Docker,
    id: String,
}

impl Container {
    /// Creates a container of `image` with no network, no capabilities and the given
    /// program (`None`: the image's own, never started).
    async fn create(
        docker: &Docker,
        image: &str,
        program: Option<(&String, Vec<String>)>,
        labels: &HashMap<String, String>,
    ) -> Result<Container, Failure> {
        let (entrypoint, cmd) = match program {
            Some((program, args)) => (Some(vec![program.clone()]), Some(args)),
            None => (None, None),
        };
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            entrypoint,
            cmd,
            labels: Some(labels.clone()),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                cap_drop: Some(vec!["ALL".to_owned()]),
                security_opt: Some(vec!["no-new-privileges".to_owned()]),
                network_mode: Some("none".to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let created = docker
            .create_container(
                None::<bollard::query_parameters::CreateContainerOptions>,
                body,
            )
            .await
            .doing("creating a container for the fork's image")?;
        Ok(Container {
            docker: docker.clone(),
            id: created.id,
        })
    }

    /// Waits for the container's program to end; its first line of output when it ended well
    /// (`N files known`), its last lines in the error otherwise.
    async fn wait_output(&self, docker: &Docker) -> Result<usize, Failure> {
        let mut wait = docker.wait_container(
            &self.id,
            Some(
                WaitContainerOptionsBuilder::new()
                    .condition("not-running")
                    .build(),
            ),
        );
        // Statting the workspace's files takes a second for 100,000 of them.
        let ended = tokio::time::timeout(LISTING_TIMEOUT, wait.next()).await;
        let mut output = String::new();
        let options = LogsOptionsBuilder::new()
            .stdout(true)
            .stderr(true)
            .tail("20")
            .build();
        let mut logs = docker.logs(&self.id, Some(options));
        while let Some(Ok(chunk)) = logs.next().await {
            output.push_str(&chunk.to_string());
        }
        match ended {
            Err(_) => Err(Failure::Server(format!(
                "listing the known files in the fork's image took over {} s: {}",
                LISTING_TIMEOUT.as_secs(),
                output.trim()
            ))),
            Ok(Some(Ok(response))) if response.status_code == 0 => output
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| {
                    Failure::Server(format!(
                        "listing the known files printed `{}`",
                        output.trim()
                    ))
                }),
            _ => Err(Failure::Server(format!(
                "listing the known files in the fork's image failed: {}",
                output.trim()
            ))),
        }
    }

    async fn remove(self) {
        let options = RemoveContainerOptionsBuilder::new().force(true).build();
        if let Err(err) = self.docker.remove_container(&self.id, Some(options)).await {
            tracing::warn!(container = %self.id, "could not remove a fork image's container ({err})");
        }
    }
}
