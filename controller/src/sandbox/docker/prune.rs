//! `harness sandboxes prune`: the containers a killed harness left behind.

use std::collections::HashMap;

use anyhow::Context;
use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};

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
pub async fn prune(all: bool) -> anyhow::Result<(Vec<Pruned>, Vec<Pruned>)> {
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
        .context("listing containers")?;
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
                docker
                    .remove_container(&id, Some(options))
                    .await
                    .with_context(|| format!("removing container {id}"))?;
                removed.push(entry(reason));
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
    Ok((removed, kept))
}
