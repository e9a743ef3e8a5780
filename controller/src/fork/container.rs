//! Container children from one image of the workspace at the step (`--sandbox docker`).
//!
//! The workspace is committed once into a layer over the children's image
//! ([`harness_runtime::sandbox::docker::fork_image`]); every child is a container of that image, whose
//! files it shares copy-on-write, and whose server knows every file's verified hash. Without
//! this each child unpacked the whole archive into its own layer and hashed every file again.
//!
//! The image is named after what it holds — the children's image (by id), its user, and every
//! entry of the workspace at the step — so a kept fork (`--keep-state`) finds it again and
//! starts children at once; without `--keep-state` it is removed when the fork ends. An image
//! that cannot take the workspace this way (a workspace folder with files of its own, a user
//! by name) is said, and its children get the archive uploaded as before.

use std::path::Path;

use anyhow::Context;
use harness_runtime::sandbox::docker::DockerSpec;
use harness_runtime::sandbox::docker::fork_image::{self, ForkImage, ForkImageError};
use sha2::Digest;

use harness_replay::restore::State;

/// Which fork an image is for: the parent session, the step, and whether the fork is kept.
pub(super) struct ForkOf<'a> {
    pub session_id: &'a str,
    pub seq: u64,
    /// `--keep-state`: the image is marked kept, and `sandboxes prune` leaves it.
    pub keep: bool,
}

/// The fork's image for children of `spec`'s image, found or made for the workspace `state`
/// held in `template`; `None` when the image cannot take it (said through `note`).
pub(super) async fn image(
    spec: &DockerSpec,
    state: &State,
    template: &Path,
    layers: &Path,
    of: ForkOf<'_>,
    note: &dyn Fn(&str),
) -> anyhow::Result<Option<ForkImage>> {
    let base = match fork_image::base(&spec.image).await {
        Ok(base) => base,
        Err(ForkImageError::Unsuitable(why)) => {
            note(&format!("{why}: each child gets the workspace uploaded"));
            return Ok(None);
        }
        Err(ForkImageError::Failed(failure)) => return Err(failure.into()),
    };
    let tag = format!(
        "agent-harness/fork-state:{}",
        name(&base.id, base.uid, base.gid, state)
    );
    if let Some(image) = fork_image::existing(&tag, of.session_id).await? {
        return Ok(Some(image));
    }
    let archive = layers.join("at-step-image.tar");
    let (from, to, owner) = (template.to_owned(), archive.clone(), (base.uid, base.gid));
    tokio::task::spawn_blocking(move || super::workspace::archive(&from, &to, Some(owner)))
        .await
        .context("archiving the workspace at the step")?
        .with_context(|| {
            format!(
                "archiving the workspace at the step into {}",
                archive.display()
            )
        })?;
    let what = format!("{}@{}", of.session_id, of.seq);
    let made = fork_image::make(
        &base,
        &tag,
        &what,
        &archive,
        hashes(state),
        of.session_id,
        of.keep,
    )
    .await;
    let _ = std::fs::remove_file(&archive);
    match made {
        Ok(image) => Ok(Some(image)),
        Err(ForkImageError::Unsuitable(why)) => {
            note(&format!("{why}: each child gets the workspace uploaded"));
            Ok(None)
        }
        Err(ForkImageError::Failed(failure)) => Err(failure.into()),
    }
}

/// The image's name: a hash of everything its content follows from.
fn name(base: &str, uid: u32, gid: u32, state: &State) -> String {
    let mut hasher = sha2::Sha256::new();
    hasher.update(format!("{base}\n{uid}:{gid}\n"));
    for (path, version) in state {
        hasher.update(path.as_bytes());
        hasher.update([0]);
        hasher.update(serde_json::to_vec(version).unwrap_or_default());
        hasher.update([b'\n']);
    }
    hex::encode(&hasher.finalize()[..8])
}

/// The `--hashes` input of `sandbox-server known-files`: each file of the state with its
/// verified hash and size (the stat fields are the server's to fill).
fn hashes(state: &State) -> Vec<u8> {
    let mut out = Vec::new();
    for (path, version) in state {
        let Some(sha256) = &version.sha256 else {
            continue;
        };
        if version.kind != sandbox_protocol::EntryKind::File || path.contains('\\') {
            continue;
        }
        let line = sandbox_protocol::KnownFile {
            path: path.clone(),
            sha256: sha256.clone(),
            size: version.size,
            mtime: [0, 0],
            ctime: [0, 0],
            ino: 0,
        };
        if serde_json::to_writer(&mut out, &line).is_ok() {
            out.push(b'\n');
        }
    }
    out
}
