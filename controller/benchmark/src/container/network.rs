//! What a task's containers may reach, phase by phase. They all sit on the task's own network,
//! which is internal (no route out); in a public phase they are joined to the internet's
//! network (`bridge`, or `--task-internet`), and left again after it. A task with an allow
//! list anywhere has an egress proxy (`sandbox-server egress-proxy` in an image of its own,
//! `FROM scratch`) on both networks: the containers' `HTTP(S)_PROXY`, and their only way out
//! in an allow-list phase. Each phase's policy is set on the proxy before the phase starts,
//! and checked: a phase never runs on a network it did not ask for.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Doing, Failed, failed};
use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, NetworkConnectRequest,
    NetworkDisconnectRequest, NetworkingConfig,
};
use bollard::query_parameters::BuildImageOptionsBuilder;
use sandbox_protocol::egress::EgressPolicy;
use sha2::{Digest, Sha256};

use super::TaskEnvironment;
use crate::NetworkPolicy;
use harness_runtime::sandbox::docker::labels_for;

/// The proxy's name on the task's network, and its ports.
pub(super) const EGRESS_HOST: &str = "harness-egress";
const PROXY_PORT: u16 = 3128;
const CONTROL_PORT: u16 = 3129;

/// A task's egress proxy.
#[derive(Debug)]
pub(super) struct Egress {
    pub id: String,
    control: String,
    token: String,
    http: reqwest::Client,
    generation: AtomicU64,
}

/// The variables that send a task's HTTP(S) through its proxy; `local` are the names reached
/// directly (the task's own services).
pub(super) fn proxy_environment(local: &[String]) -> Vec<String> {
    let proxy = format!("http://{EGRESS_HOST}:{PROXY_PORT}");
    let mut skip = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    skip.extend(local.iter().cloned());
    let skip = skip.join(",");
    [
        ("HTTP_PROXY", &proxy),
        ("HTTPS_PROXY", &proxy),
        ("http_proxy", &proxy),
        ("https_proxy", &proxy),
        ("NO_PROXY", &skip),
        ("no_proxy", &skip),
    ]
    .iter()
    .map(|(k, v)| format!("{k}={v}"))
    .collect()
}

/// The proxy's image, built from the static server when the engine lacks it.
async fn proxy_image(docker: &Docker, server: &std::path::Path) -> Failed<String> {
    let binary = std::fs::read(server)
        .doing_with(|| format!("reading the static sandbox-server {}", server.display()))?;
    let tag = format!(
        "agent-harness/egress:{}",
        &hex::encode(Sha256::digest(&binary))[..16]
    );
    if docker.inspect_image(&tag).await.is_ok() {
        return Ok(tag);
    }
    let dockerfile = "FROM scratch\nCOPY sandbox-server /sandbox-server\nUSER 65534:65534\nENTRYPOINT [\"/sandbox-server\", \"egress-proxy\"]\n";
    let mut builder = tar::Builder::new(Vec::new());
    for (name, bytes, mode) in [
        ("Dockerfile", dockerfile.as_bytes(), 0o644),
        ("sandbox-server", binary.as_slice(), 0o755),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_mode(mode);
        header.set_size(bytes.len() as u64);
        builder.append_data(&mut header, name, bytes)?;
    }
    let context = builder.into_inner()?;
    let options = BuildImageOptionsBuilder::new().t(&tag).rm(true).build();
    crate::image::stream_build(docker, options, context)
        .await
        .doing("building the egress proxy's image")?;
    Ok(tag)
}

/// The subnets of a network (its IPAM configuration); at least one, or an error.
async fn subnets(docker: &bollard::Docker, network: &str) -> Failed<Vec<String>> {
    let inspected = docker
        .inspect_network(
            network,
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await
        .doing_with(|| format!("inspecting the task's network {network}"))?;
    let subnets: Vec<String> = inspected
        .ipam
        .and_then(|ipam| ipam.config)
        .into_iter()
        .flatten()
        .filter_map(|config| config.subnet)
        .collect();
    if subnets.is_empty() {
        failed!("the task's network {network} has no subnet to admit the proxy's clients from");
    }
    Ok(subnets)
}

/// The proxy's container: on the task's network under [`EGRESS_HOST`], admitting clients
/// from `allow_from` only, with nothing it does not need (no capabilities, a read-only root).
/// Its own step: the settings are a fixed shape, apart from the starting.
fn proxy_container(
    network: &str,
    session_id: &str,
    image: String,
    allow_from: Vec<String>,
    token: &str,
) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(image),
        cmd: Some(allow_from),
        env: Some(vec![format!("HARNESS_EGRESS_TOKEN={token}")]),
        labels: Some(labels_for(session_id, None)),
        host_config: Some(HostConfig {
            network_mode: Some(network.to_owned()),
            readonly_rootfs: Some(true),
            cap_drop: Some(vec!["ALL".to_owned()]),
            security_opt: Some(vec!["no-new-privileges".to_owned()]),
            memory: Some(256 << 20),
            ..Default::default()
        }),
        networking_config: Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                network.to_owned(),
                EndpointSettings {
                    aliases: Some(vec![EGRESS_HOST.to_owned()]),
                    ..Default::default()
                },
            )])),
        }),
        ..Default::default()
    }
}

impl TaskEnvironment {
    /// Starts the task's egress proxy on its network and the internet's, nothing allowed yet.
    pub(super) async fn start_egress(
        &mut self,
        session_id: &str,
        server: &std::path::Path,
    ) -> Failed<()> {
        let image = proxy_image(&self.docker, server).await?;
        let token = format!("{:032x}", rand::random::<u128>());
        // Only the task's own network may use the proxy: not the other containers of the
        // internet network it also joins (a shared `bridge`: other trials among them).
        let mut allow_from = Vec::new();
        for subnet in subnets(&self.docker, &self.network).await? {
            allow_from.extend(["--allow-from".to_owned(), subnet]);
        }
        let body = proxy_container(&self.network, session_id, image, allow_from, &token);
        let name = format!("harness-{session_id}-egress");
        let id = super::create_named(&self.docker, &name, body)
            .await
            .doing("creating the task's egress proxy")?;
        self.sidecars.push(id.clone());
        self.join_internet(&id).await.doing_with(|| {
            format!(
                "joining the egress proxy to the internet's network `{}`",
                self.internet
            )
        })?;
        self.docker
            .start_container(&id, None)
            .await
            .doing("starting the task's egress proxy")?;
        let address = super::address_on(&self.docker, &id, &self.network).await?;
        let egress = Egress {
            id,
            control: format!("http://{address}:{CONTROL_PORT}"),
            token,
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(10))
                .build()
                .doing("making the egress proxy's client")?,
            generation: AtomicU64::new(0),
        };
        egress.wait_ready().await?;
        self.egress = Some(egress);
        Ok(())
    }

    /// Joins the container `id` to the internet's network.
    async fn join_internet(&self, id: &str) -> Result<(), bollard::errors::Error> {
        let request = NetworkConnectRequest {
            container: id.to_owned(),
            endpoint_config: None,
        };
        self.docker.connect_network(&self.internet, request).await
    }

    /// The containers of the task that a phase's network applies to: the main one and its
    /// services (not the proxy).
    fn task_containers(&self) -> Vec<String> {
        let proxy = self.egress.as_ref().map(|e| e.id.as_str());
        std::iter::once(self.main_id.clone())
            .chain(self.sidecars.iter().cloned())
            .filter(|id| !id.is_empty() && Some(id.as_str()) != proxy)
            .collect()
    }

    /// Puts the task's containers on the network `policy` asks for, and checks it.
    pub async fn set_network(&self, policy: &NetworkPolicy) -> Failed<()> {
        let public = *policy == NetworkPolicy::Public;
        for id in self.task_containers() {
            let joined = self.joined(&id).await?;
            if public && !joined {
                self.join_internet(&id).await.doing_with(|| {
                    format!("joining the task to the internet (`{}`)", self.internet)
                })?;
            } else if !public && joined {
                self.docker
                    .disconnect_network(
                        &self.internet,
                        NetworkDisconnectRequest {
                            container: id.clone(),
                            force: Some(true),
                        },
                    )
                    .await
                    .doing_with(|| {
                        format!("taking the task off the internet (`{}`)", self.internet)
                    })?;
            }
            // Checked, not assumed: a restricted phase never starts with a route out.
            if self.joined(&id).await? != public {
                failed!(
                    "the task's container {} is {} the internet's network after it was set for a {} phase",
                    &id[..12.min(id.len())],
                    if public { "not on" } else { "still on" },
                    policy.describe()
                );
            }
        }
        match (&self.egress, policy) {
            (Some(egress), _) => egress.set(policy).await,
            (None, NetworkPolicy::Allowlist(_)) => failed!(
                "an allow-list phase without the task's egress proxy: refused (it would run with no network, not the one it asked for)"
            ),
            (None, _) => Ok(()),
        }
    }

    /// Whether the container is on the internet's network.
    async fn joined(&self, id: &str) -> Failed<bool> {
        let inspect = self
            .docker
            .inspect_container(id, None)
            .await
            .doing("inspecting a task's container")?;
        Ok(inspect
            .network_settings
            .and_then(|s| s.networks)
            .is_some_and(|networks| networks.contains_key(&self.internet)))
    }

    /// What the egress proxy let through and refused under the policy in force (none
    /// without a proxy, or when it cannot be asked).
    pub async fn egress_in_force(&self) -> Vec<harness_log::EgressRecord> {
        let Some(egress) = &self.egress else {
            return Vec::new();
        };
        let generation = egress.generation.load(Ordering::SeqCst);
        let answer: serde_json::Value = match egress
            .http
            .get(format!("{}/decisions", egress.control))
            .bearer_auth(&egress.token)
            .send()
            .await
        {
            Ok(response) => response.json().await.unwrap_or_default(),
            Err(_) => return Vec::new(),
        };
        let mut records: Vec<harness_log::EgressRecord> = answer["decisions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["generation"].as_u64() == Some(generation))
            .filter_map(|d| {
                Some(harness_log::EgressRecord {
                    host: d["host"].as_str()?.to_owned(),
                    allowed: d["allowed"].as_bool()?,
                    count: d["count"].as_u64()?,
                })
            })
            .collect();
        // A phase that tried more hosts than the proxy counts says so, not silently.
        if let Some(n) = answer["not_counted"][generation.to_string()].as_u64() {
            records.push(harness_log::EgressRecord {
                host: "(more hosts than the proxy counts)".to_owned(),
                allowed: false,
                count: n,
            });
        }
        records
    }
}

impl Egress {
    /// Waits for the proxy to answer its health check, for at most 30 s: its policy can be
    /// set only once it listens.
    async fn wait_ready(&self) -> Failed<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ready = self
                .http
                .get(format!("{}/healthz", self.control))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ready {
                break;
            }
            if Instant::now() >= deadline {
                failed!("the task's egress proxy did not answer within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Sets the proxy's policy for the next phase; the proxy confirms it before this returns.
    async fn set(&self, policy: &NetworkPolicy) -> Failed<()> {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let body: EgressPolicy = policy.egress(generation);
        let response = self
            .http
            .put(format!("{}/policy", self.control))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .doing("setting the egress proxy's policy")?;
        let status = response.status();
        let answer: serde_json::Value = response.json().await.unwrap_or_default();
        if !status.is_success() || answer["generation"].as_u64() != Some(generation) {
            failed!("the egress proxy refused the policy ({status}): {answer}");
        }
        Ok(())
    }
}
