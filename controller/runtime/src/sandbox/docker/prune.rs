//! `harness sandboxes prune`: the containers (and task networks) a killed harness
//! left behind.

use std::collections::HashMap;

use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};

use super::super::{Doing, Failure};
use super::{
    LABEL_EXPIRES, LABEL_HOST, LABEL_MANAGED, LABEL_PID, LABEL_PID_START, LABEL_SESSION, connect,
    now_secs, process_start, this_host,
};

/// A container `prune` looked at.
#[derive(Debug, Clone, PartialEq)]
pub struct Pruned {
    pub id: String,
    pub session: String,
    pub reason: String,
}

/// Removes the harness's containers whose controller is gone from this host, whose lifetime
/// has passed, or (`all`) every one. Returns those removed and, separately, those kept.
pub async fn prune(all: bool) -> Result<(Vec<Pruned>, Vec<Pruned>), Failure> {
    let docker = connect().await?;
    let filters = HashMap::from([("label".to_owned(), vec![LABEL_MANAGED.to_owned()])]);
    let containers = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filters)
                .build(),
        ))
        .await
        .doing("listing containers")?;
    let host = this_host();
    let now = now_secs();
    let (mut removed, mut kept) = (Vec::new(), Vec::new());
    for container in containers {
        let labels = container.labels.unwrap_or_default();
        let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
        let id = container.id.unwrap_or_default();
        let expired = label(LABEL_EXPIRES)
            .parse::<u64>()
            .is_ok_and(|expires| expires <= now);
        let pid: Option<u32> = label(LABEL_PID).parse().ok();
        let owner_alive = label(LABEL_HOST) == host
            && pid.is_some_and(|pid| {
                process_start(pid).map(|start| start.to_string()) == Some(label(LABEL_PID_START))
            });
        let reason = if all {
            Some("--all".to_owned())
        } else if expired {
            Some("its lifetime has passed".to_owned())
        } else if label(LABEL_HOST) != host {
            None
        } else if !owner_alive {
            Some(format!("its controller (pid {}) is gone", label(LABEL_PID)))
        } else {
            None
        };
        let entry = |reason: String| Pruned {
            id: id.chars().take(12).collect(),
            session: label(LABEL_SESSION),
            reason,
        };
        match reason {
            Some(reason) => {
                let options = RemoveContainerOptionsBuilder::new().force(true).build();
                match docker.remove_container(&id, Some(options)).await {
                    Ok(()) => removed.push(entry(reason)),
                    // Gone already, or being removed by its own controller as it exits.
                    Err(bollard::errors::Error::DockerResponseServerError {
                        status_code: 404 | 409,
                        ..
                    }) => {}
                    Err(err) => {
                        return Err(Failure::Engine {
                            what: format!("removing container {id}"),
                            source: err,
                        });
                    }
                }
            }
            None if label(LABEL_HOST) != host => kept.push(entry(format!(
                "its controller runs on {} (use --all)",
                label(LABEL_HOST)
            ))),
            None => kept.push(entry(format!(
                "its controller (pid {}) is running",
                label(LABEL_PID)
            ))),
        }
    }
    prune_networks(&docker, all, &mut removed).await?;
    prune_fork_images(&docker, all, &mut removed, &mut kept).await?;
    Ok((removed, kept))
}

/// Whether the controller the labels name runs on this host still.
fn owner_alive(label: &dyn Fn(&str) -> String, host: &str) -> bool {
    label(LABEL_HOST) == host
        && label(LABEL_PID).parse::<u32>().is_ok_and(|pid| {
            process_start(pid).map(|start| start.to_string()) == Some(label(LABEL_PID_START))
        })
}

/// Forks' images (`replay fork --sandbox docker`) whose fork was killed before it removed
/// them (or, with `all`, every one); an image kept by `--keep-state` stays without `all`, and
/// an image that containers still use stays for a later prune.
async fn prune_fork_images(
    docker: &bollard::Docker,
    all: bool,
    removed: &mut Vec<Pruned>,
    kept: &mut Vec<Pruned>,
) -> Result<(), Failure> {
    let filters = HashMap::from([(
        "label".to_owned(),
        vec![super::fork_image::LABEL_FORK_STATE.to_owned()],
    )]);
    let images = docker
        .list_images(Some(
            bollard::query_parameters::ListImagesOptionsBuilder::new()
                .filters(&filters)
                .build(),
        ))
        .await
        .doing("listing images")?;
    let host = this_host();
    for image in images {
        let label = |key: &str| image.labels.get(key).cloned().unwrap_or_default();
        let name = image
            .repo_tags
            .first()
            .cloned()
            .unwrap_or_else(|| image.id.clone());
        let entry = |reason: String| Pruned {
            id: format!("image {name}"),
            session: label(super::fork_image::LABEL_FORK_STATE),
            reason,
        };
        let was_kept = label(super::fork_image::LABEL_KEPT) == "true";
        let reason = if all {
            "--all".to_owned()
        } else if was_kept {
            kept.push(entry(
                "kept by `replay fork --keep-state` (use --all, or docker rmi)".to_owned(),
            ));
            continue;
        } else if label(LABEL_HOST) == host && !owner_alive(&label, &host) {
            format!("its fork (pid {}) is gone", label(LABEL_PID))
        } else {
            continue;
        };
        match docker
            .remove_image(
                &image.id,
                Some(bollard::query_parameters::RemoveImageOptionsBuilder::new().build()),
                None,
            )
            .await
        {
            Ok(_) => removed.push(entry(reason)),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => {}
            // A live fork that reused it holds it (or a child's container is left).
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => kept.push(entry(
                "a container still uses it (a running fork's; a later prune removes it)".to_owned(),
            )),
            Err(err) => {
                return Err(Failure::Engine {
                    what: format!("removing image {name}"),
                    source: err,
                });
            }
        }
    }
    Ok(())
}

/// Task networks whose controller is gone (or `all`), once their containers
/// are: a network still in use is left for a later prune.
async fn prune_networks(
    docker: &bollard::Docker,
    all: bool,
    removed: &mut Vec<Pruned>,
) -> Result<(), Failure> {
    let filters = HashMap::from([("label".to_owned(), vec![LABEL_MANAGED.to_owned()])]);
    let networks = docker
        .list_networks(Some(
            bollard::query_parameters::ListNetworksOptionsBuilder::new()
                .filters(&filters)
                .build(),
        ))
        .await
        .doing("listing networks")?;
    let host = this_host();
    for network in networks {
        let labels = network.labels.unwrap_or_default();
        let label = |key: &str| labels.get(key).cloned().unwrap_or_default();
        let name = network.name.unwrap_or_default();
        let gone = all || (label(LABEL_HOST) == host && !owner_alive(&label, &host));
        if gone && docker.remove_network(&name).await.is_ok() {
            removed.push(Pruned {
                id: format!("network {name}"),
                session: label(LABEL_SESSION),
                reason: if all {
                    "--all".to_owned()
                } else {
                    format!("its controller (pid {}) is gone", label(LABEL_PID))
                },
            });
        }
    }
    Ok(())
}
