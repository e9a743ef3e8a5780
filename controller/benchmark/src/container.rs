//! A task's containers: its own image (built, cached) with `sandbox-server` injected, its
//! sidecars (compose), on a network of its own, all removed on every path.
//!
//! The main container runs the task's image unchanged but for its entrypoint: a static
//! `sandbox-server` is uploaded into the created container (with its token) before it starts,
//! and started as its first process, so an image without our libraries still runs it. The
//! image's own entrypoint (which Harbor keeps) runs after the server has read and deleted its
//! token, as the server's process `entrypoint`: no process of the task ever sees the token. Inside it the container is the boundary: file tools
//! reach the whole file system (`--files-anywhere`), commands start in the task's working
//! folder, and the network is what each phase asks for ([`network`]).

mod exec;
mod inject;
mod network;
mod services;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Doing, Failed, IntoFailure, failed, failure};
use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, NetworkCreateRequest, NetworkingConfig,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, RemoveContainerOptionsBuilder,
};

pub use exec::Exec;
pub use inject::{compose_vars, static_server};
pub use services::build_images;

use super::image::{BuildSettings, Built};
use super::{BenchTask, Environment, MainImage};
use harness_runtime::sandbox::docker::{block_on_thread, connect, labels_for, unpack_and_start};
use harness_runtime::sandbox::{SandboxClient, StartError};

/// Where the injected server and its token live in the container.
const HARNESS_DIR: &str = ".harness";
const SERVER_PORT: u16 = 8080;

/// What starting a task's environment needs.
pub struct StartSpec<'a> {
    pub task: &'a BenchTask,
    pub session_id: &'a str,
    pub token: &'a str,
    /// A `sandbox-server` built statically, to inject.
    pub server_binary: &'a Path,
    pub settings: &'a BuildSettings,
    /// The Docker network that is the task's internet (`bridge` by default).
    pub internet: &'a str,
    pub tools: Option<&'a [String]>,
    /// An image for the main container instead of the task's (a rerun's recorded image).
    pub main_image: Option<&'a str>,
    /// A progress line for each build.
    pub note: &'a (dyn Fn(&str) + Sync),
}

/// A running task environment.
#[derive(Debug)]
pub struct TaskEnvironment {
    docker: Docker,
    pub main_id: String,
    sidecars: Vec<String>,
    network: String,
    pub client: SandboxClient,
    /// Where commands start, inside the container.
    pub workdir: String,
    /// The images built (or found cached) for it.
    pub built: Vec<(String, Built)>,
    pub image: String,
    /// The image's own user: the verifier's when the task names none.
    pub image_user: String,
    /// The network that is the task's internet.
    internet: String,
    /// The task's egress proxy, when a phase has an allow list.
    egress: Option<network::Egress>,
    /// The compose services but `main`, by name (their container ids).
    pub services: std::collections::BTreeMap<String, String>,
    /// The names the task's containers reach each other by (its compose services).
    local_names: Vec<String>,
    removed: bool,
}

impl TaskEnvironment {
    /// Builds what is missing, starts the sidecars, then the main container with the server,
    /// and waits for its health. On any failure everything started is removed.
    pub async fn start(spec: &StartSpec<'_>) -> Result<TaskEnvironment, StartError> {
        let docker = connect().await?;
        let network = format!("harness-{}", spec.session_id);
        let mut environment = TaskEnvironment {
            docker,
            main_id: String::new(),
            sidecars: Vec::new(),
            network: String::new(),
            client: SandboxClient::new("http://127.0.0.1:0", Some(spec.token.to_owned())),
            workdir: "/".to_owned(),
            built: Vec::new(),
            image: String::new(),
            image_user: "root".to_owned(),
            internet: spec.internet.to_owned(),
            egress: None,
            services: std::collections::BTreeMap::new(),
            local_names: Vec::new(),
            removed: false,
        };
        match environment.boot(spec, &network).await {
            Ok(()) => Ok(environment),
            Err(err) => {
                let logs = if environment.main_id.is_empty() {
                    String::new()
                } else {
                    services::logs(&environment.docker, &environment.main_id).await
                };
                environment.remove().await;
                let err = if logs.is_empty() {
                    err
                } else {
                    err.after(&format!("the container's last lines:\n{logs}"))
                };
                Err(StartError::Failed(err))
            }
        }
    }

    async fn boot(&mut self, spec: &StartSpec<'_>, network: &str) -> Failed<()> {
        // Internal: no route out. A public phase joins the containers to the internet's
        // network; an allow-list phase goes out through the egress proxy only.
        self.docker
            .create_network(NetworkCreateRequest {
                name: network.to_owned(),
                internal: Some(true),
                labels: Some(labels_for(spec.session_id, None)),
                ..Default::default()
            })
            .await
            .doing_with(|| format!("creating the task's network {network}"))?;
        self.network = network.to_owned();
        let task = spec.task;
        if task.network.any_allowlist(&task.steps) {
            self.start_egress(spec.session_id, spec.server_binary)
                .await?;
        }
        let main = self.resolve(spec).await?;
        self.start_main(spec, &main).await?;
        self.set_network(&task.network.baseline).await?;
        self.copy_environment_folder(spec).await
    }

    /// The variables that send the task's HTTP(S) through its egress proxy, when it has one.
    fn proxy_environment(&self) -> Vec<String> {
        if self.egress.is_none() {
            return Vec::new();
        }
        let mut local = self.local_names.clone();
        local.push("main".to_owned());
        local.dedup();
        network::proxy_environment(&local)
    }

    /// Harbor copies a prebuilt image's `environment/` folder (when it builds nothing from it)
    /// into the working folder.
    async fn copy_environment_folder(&self, spec: &StartSpec<'_>) -> Failed<()> {
        let task = spec.task;
        let environment_dir = task.dir.join("environment");
        if matches!(
            &task.environment,
            Environment::Single(MainImage::Prebuilt { fallback: None, .. })
        ) && spec.main_image.is_none()
            && environment_dir.is_dir()
            && std::fs::read_dir(&environment_dir).is_ok_and(|mut d| d.next().is_some())
        {
            let workdir = self.workdir.clone();
            self.upload(&environment_dir, None, &workdir).await?;
        }
        Ok(())
    }

    /// The main container's image (built, found or pulled) and its compose settings; the
    /// sidecars started first.
    async fn resolve(&mut self, spec: &StartSpec<'_>) -> Failed<services::Main> {
        let task = spec.task;
        let main = match &task.environment {
            Environment::Single(_) if spec.main_image.is_some() => services::Main {
                image: spec.main_image.unwrap_or_default().to_owned(),
                service: None,
            },
            Environment::Single(image) => services::Main {
                image: services::resolve_main(
                    &self.docker,
                    task,
                    image,
                    spec.settings,
                    spec.note,
                    &mut self.built,
                )
                .await?,
                service: None,
            },
            Environment::Compose {
                file,
                main,
                main_image,
            } => {
                let compose = services::load_compose(task, file, spec.session_id)?;
                for warning in &compose.warnings {
                    (spec.note)(&format!("warning: {warning}"));
                }
                let main_service = compose.services.get(main).cloned().ok_or_else(|| {
                    failure!(
                        "{}: no `{main}` service (the agent's container)",
                        file.display()
                    )
                })?;
                self.local_names = compose.services.keys().cloned().collect();
                services::start_sidecars(self, &compose, main, spec).await?;
                let image = match spec.main_image {
                    Some(image) => image.to_owned(),
                    None => {
                        services::service_image(
                            &self.docker,
                            task,
                            &main_service,
                            main_image.as_ref(),
                            spec.settings,
                            spec.note,
                            &mut self.built,
                        )
                        .await?
                    }
                };
                services::Main {
                    image,
                    service: Some(main_service),
                }
            }
        };
        Ok(main)
    }

    async fn start_main(&mut self, spec: &StartSpec<'_>, main: &services::Main) -> Failed<()> {
        let task = spec.task;
        let config = self
            .docker
            .inspect_image(&main.image)
            .await
            .doing_with(|| format!("inspecting the image {}", main.image))?
            .config
            .unwrap_or_default();
        let service = main.service.as_ref();
        self.workdir = task
            .workdir
            .clone()
            .or_else(|| service.and_then(|s| s.working_dir.clone()))
            .or(config.working_dir.clone())
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| "/".to_owned());
        self.image = main.image.clone();
        self.image_user = config
            .user
            .clone()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "root".to_owned());
        let body = self.main_body(spec, main, &config);
        let name = format!("harness-{}-main", spec.session_id);
        self.main_id = create_named(&self.docker, &name, body)
            .await
            .doing("creating the task's container")?;
        let injection = inject::injection(spec.server_binary, spec.token)?;
        unpack_and_start(
            &self.docker,
            &self.main_id,
            injection,
            "uploading sandbox-server into the task's container",
            "starting the task's container",
        )
        .await?;
        self.client = self.wait_healthy(spec.token).await?;
        Ok(())
    }

    /// The main container: the task's image with the server as its command (after the
    /// image's entrypoint, kept as Harbor keeps it), the task's environment, limits and user.
    fn main_body(
        &self,
        spec: &StartSpec<'_>,
        main: &services::Main,
        config: &bollard::models::ImageConfig,
    ) -> ContainerCreateBody {
        let task = spec.task;
        let service = main.service.as_ref();
        let mut env: Vec<String> = task.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if let Some(service) = service {
            env.extend(service.environment.iter().map(|(k, v)| format!("{k}={v}")));
        }
        env.extend(self.proxy_environment());
        // The injected server's spans go to the controller's collector.
        env.extend(harness_otel::forwarded_environment());
        let mut server: Vec<String> = inject::server_command(spec, &self.workdir);
        // The task's own entrypoint (the compose service's, else the image's), with its
        // command, runs once the server is up and the token gone.
        let own = service
            .and_then(|s| s.entrypoint.clone())
            .or_else(|| config.entrypoint.clone())
            .filter(|e| !e.is_empty());
        if let Some(own) = own {
            let mut words = own;
            words.extend(
                service
                    .and_then(|s| s.command.clone())
                    .or_else(|| config.cmd.clone())
                    .unwrap_or_default(),
            );
            server.push("--entrypoint-process".to_owned());
            server.push(serde_json::to_string(&words).unwrap_or_default());
        }
        let (entrypoint, cmd) = (Some(vec![server[0].clone()]), server[1..].to_vec());
        let resources = &task.resources;
        let memory = service
            .and_then(|s| s.memory_bytes)
            .or(resources.memory_mb.map(|mb| (mb * 1024 * 1024) as i64));
        let host_config = HostConfig {
            memory,
            memory_swap: memory,
            nano_cpus: service
                .and_then(|s| s.cpus)
                .or(resources.cpus)
                .map(|c| (c * 1e9) as i64),
            binds: service.map(|s| s.binds.clone()).filter(|b| !b.is_empty()),
            network_mode: Some(self.network.clone()),
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(main.image.clone()),
            entrypoint,
            cmd: Some(cmd),
            env: Some(env),
            working_dir: Some(self.workdir.clone()),
            user: service
                .and_then(|s| s.user.clone())
                .or_else(|| task.agent_user.clone()),
            labels: Some(labels_for(spec.session_id, None)),
            host_config: Some(host_config),
            networking_config: Some(networking(&self.network, "main")),
            ..Default::default()
        }
    }

    async fn wait_healthy(&self, token: &str) -> Failed<SandboxClient> {
        let address = address_on(&self.docker, &self.main_id, &self.network).await?;
        let client = SandboxClient::new(
            &format!("http://{address}:{SERVER_PORT}"),
            Some(token.to_owned()),
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match client.health().await {
                Ok(()) => return Ok(client),
                Err(err) => {
                    let state = services::state(&self.docker, &self.main_id).await?;
                    if !state.running {
                        failed!(
                            "the task's container stopped while starting ({})",
                            state.describe()
                        );
                    }
                    if Instant::now() >= deadline {
                        return Err(err.doing(
                            "the sandbox in the task's container was not healthy within 30 s"
                                .to_owned(),
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// The main container's state.
    pub async fn state(&self) -> Failed<harness_runtime::sandbox::docker::ContainerState> {
        services::state(&self.docker, &self.main_id).await
    }

    /// Removes the containers and the network (every path ends here; `Drop` too).
    pub async fn remove(&mut self) {
        if self.removed {
            return;
        }
        let options = RemoveContainerOptionsBuilder::new().force(true).build();
        let ids: Vec<String> = std::iter::once(self.main_id.clone())
            .chain(self.sidecars.iter().cloned())
            .filter(|id| !id.is_empty())
            .collect();
        for id in ids {
            let _ = self
                .docker
                .remove_container(&id, Some(options.clone()))
                .await;
        }
        if !self.network.is_empty() {
            let _ = self.docker.remove_network(&self.network).await;
        }
        self.removed = true;
    }
}

impl Drop for TaskEnvironment {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        let (docker, network) = (self.docker.clone(), self.network.clone());
        let ids: Vec<String> = std::iter::once(self.main_id.clone())
            .chain(self.sidecars.clone())
            .filter(|id| !id.is_empty())
            .collect();
        block_on_thread(move || async move {
            let options = RemoveContainerOptionsBuilder::new().force(true).build();
            for id in ids {
                let _ = docker.remove_container(&id, Some(options.clone())).await;
            }
            if !network.is_empty() {
                let _ = docker.remove_network(&network).await;
            }
        });
    }
}

/// Creates the container `name` from `body`; its id.
async fn create_named(
    docker: &Docker,
    name: &str,
    body: ContainerCreateBody,
) -> Result<String, bollard::errors::Error> {
    let options = CreateContainerOptionsBuilder::new().name(name).build();
    Ok(docker.create_container(Some(options), body).await?.id)
}

/// A container's address on `network`.
async fn address_on(docker: &Docker, id: &str, network: &str) -> Failed<String> {
    let inspect = docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
        .doing("inspecting a task's container")?;
    inspect
        .network_settings
        .and_then(|s| s.networks)
        .and_then(|networks| networks.get(network).cloned())
        .and_then(|endpoint| endpoint.ip_address)
        .filter(|ip| !ip.is_empty())
        .ok_or_else(|| failure!("a task's container has no address on its network {network}"))
}

/// The container's endpoint on the task's network, reachable by `alias` from its services.
fn networking(network: &str, alias: &str) -> NetworkingConfig {
    NetworkingConfig {
        endpoints_config: Some(HashMap::from([(
            network.to_owned(),
            EndpointSettings {
                aliases: Some(vec![alias.to_owned()]),
                ..Default::default()
            },
        )])),
    }
}
