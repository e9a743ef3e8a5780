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

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    LogsOptionsBuilder, RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder,
    WaitContainerOptionsBuilder,
};
use futures::StreamExt;

use super::{Doing, Failure, IntoFailure};

mod making;
pub use making::make;

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
