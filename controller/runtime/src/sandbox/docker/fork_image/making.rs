//! Making a fork's image from the children's: the workspace unpacked into a container that
//! never starts and committed, then the `--known-files` list made in a container of that and
//! committed over it under the fork's name.

use std::collections::HashMap;
use std::path::Path;

use bollard::Docker;
use bollard::models::ContainerConfig;
use bollard::query_parameters::{
    CommitContainerOptionsBuilder, DownloadFromContainerOptionsBuilder,
    UploadToContainerOptionsBuilder,
};
use futures::StreamExt;

use super::super::{connect, labels_for, unpack};
use super::{
    BaseImage, Container, FOLDER, ForkImage, ForkImageError, KNOWN_FILES, KNOWN_LABEL,
    LABEL_FORK_STATE, LABEL_KEPT, remove,
};
use super::{Doing, Failure};

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
    let docker = connect().await?;
    let mut labels = labels_for(session_id, None);
    labels.insert(LABEL_FORK_STATE.to_owned(), what.to_owned());
    if keep {
        labels.insert(LABEL_KEPT.to_owned(), "true".to_owned());
    }
    let making = Making {
        docker: &docker,
        base,
        labels: &labels,
        name: tag.rsplit_once(':').unwrap_or((tag, "latest")),
    };
    let filled = making.fill(archive).await?;
    let Some(server) = &base.server else {
        // No server to stat the files with: the children hash them (still nothing unpacked).
        making.relabel(&filled).await?;
        return Ok(ForkImage {
            tag: tag.to_owned(),
            known_files: None,
            reused: false,
            holder: None,
        });
    };
    let lister = (server, listing_args(&base.workspace));
    let named = making.list(&filled, lister, &hashes).await?;
    Ok(ForkImage {
        tag: tag.to_owned(),
        known_files: (named > 0).then(|| KNOWN_FILES.to_owned()),
        reused: false,
        holder: None,
    })
}

/// What the steps of [`make`] share: the engine, the children's image, the labels of every
/// container and image they make, and the fork's image's name (repository and version).
struct Making<'a> {
    docker: &'a Docker,
    base: &'a BaseImage,
    labels: &'a HashMap<String, String>,
    name: (&'a str, &'a str),
}

impl Making<'_> {
    /// The workspace in a container that never starts, committed; the image's id. The
    /// container is removed whether or not this worked.
    async fn fill(&self, archive: &Path) -> Result<String, ForkImageError> {
        let (docker, base) = (self.docker, self.base);
        let holder = Container::create(docker, &base.id, None, self.labels).await?;
        let filled = async {
            if !workspace_is_empty(docker, &holder.id, &base.workspace).await? {
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
            Ok::<_, ForkImageError>(commit(docker, &holder.id, None, self.labels, base).await?)
        }
        .await;
        holder.remove().await;
        filled
    }

    /// With no server to list the files: `filled` committed under the fork's name, labelled as
    /// naming none. `filled` is removed when that fails (nothing else would).
    async fn relabel(&self, filled: &str) -> Result<(), ForkImageError> {
        let relabelled = async {
            let relabel = Container::create(self.docker, filled, None, self.labels).await?;
            let mut labels = self.labels.clone();
            labels.insert(KNOWN_LABEL.to_owned(), "0".to_owned());
            let done = commit(
                self.docker,
                &relabel.id,
                Some(self.name),
                &labels,
                self.base,
            )
            .await;
            relabel.remove().await;
            done
        }
        .await;
        if relabelled.is_err() {
            remove(filled).await;
        }
        relabelled?;
        Ok(())
    }

    /// The list, made inside an image of the workspace by `lister` (the server and its
    /// arguments), then committed over it under the fork's name; the first commit is its
    /// parent layer, so removing the tag later removes both. How many files it names; on a
    /// failure the workspace's layer is removed too.
    async fn list(
        &self,
        filled: &str,
        lister: (&String, Vec<String>),
        hashes: &[u8],
    ) -> Result<usize, ForkImageError> {
        let docker = self.docker;
        let stamper = Container::create(docker, filled, Some(lister), self.labels).await;
        let stamper = match stamper {
            Ok(stamper) => stamper,
            Err(err) => {
                remove(filled).await;
                return Err(err.into());
            }
        };
        let listed = async {
            let input = hashes_archive(hashes, self.base.uid, self.base.gid)
                .doing("packing the workspace's hashes")?;
            unpack(docker, &stamper.id, "/", input)
                .await
                .doing("uploading the workspace's hashes")?;
            docker
                .start_container(&stamper.id, None)
                .await
                .doing("starting the container that lists the known files")?;
            let named = stamper.wait_output(docker).await?;
            let mut labels = self.labels.clone();
            labels.insert(KNOWN_LABEL.to_owned(), named.to_string());
            commit(docker, &stamper.id, Some(self.name), &labels, self.base).await?;
            Ok::<_, Failure>(named)
        }
        .await;
        stamper.remove().await;
        if listed.is_err() {
            // The workspace's layer alone, untagged: nothing else would remove it.
            remove(filled).await;
        }
        Ok(listed?)
    }
}

/// The arguments of `sandbox-server known-files` in the workspace's image: the workspace, the
/// hashes uploaded beside it, and where the list goes.
fn listing_args(workspace: &str) -> Vec<String> {
    vec![
        "known-files".to_owned(),
        "--workspace".to_owned(),
        workspace.to_owned(),
        "--hashes".to_owned(),
        format!("/{FOLDER}/hashes.jsonl"),
        "--out".to_owned(),
        KNOWN_FILES.to_owned(),
    ]
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
