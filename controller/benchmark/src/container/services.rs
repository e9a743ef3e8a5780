//! A task's images (built, found, or pulled) and its sidecar services, started in the order
//! their `depends_on` asks and waited for (started, healthy, completed).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Doing, Failed, failed, failure};
use bollard::Docker;
use bollard::models::{ContainerCreateBody, HealthConfig, HealthStatusEnum, HostConfig};
use bollard::query_parameters::{
    CreateImageOptionsBuilder, InspectContainerOptions, LogsOptionsBuilder,
};
use futures::StreamExt;

use super::super::compose::{self, Compose, Condition, Service};
use super::super::image::{self, BuildSettings, Built};
use super::super::{BenchTask, MainImage};
use super::{StartSpec, TaskEnvironment, networking};
use harness_runtime::sandbox::docker::{ContainerState, labels_for};

/// The main service's image, and its compose settings when it has some.
pub(super) struct Main {
    pub image: String,
    pub service: Option<Service>,
}

/// Builds or finds the image of a task's single container.
pub(super) async fn resolve_main(
    docker: &Docker,
    task: &BenchTask,
    image: &MainImage,
    settings: &BuildSettings,
    note: &(dyn Fn(&str) + Sync),
    built: &mut Vec<(String, Built)>,
) -> Failed<String> {
    let (context, dockerfile) = match image {
        MainImage::Build {
            context,
            dockerfile,
        } => (context, dockerfile),
        MainImage::Prebuilt { name, fallback } => {
            let mapped = settings.map_image(name);
            if docker.inspect_image(&mapped).await.is_ok() {
                return Ok(mapped);
            }
            let Some((context, dockerfile)) = fallback else {
                return pull(docker, &mapped, note).await.map(|()| mapped);
            };
            note(&format!(
                "image {mapped} is not on the engine: building the task's Dockerfile instead"
            ));
            (context, dockerfile)
        }
    };
    let no_args = BTreeMap::new();
    build(
        docker, task, "main", context, dockerfile, &no_args, settings, note, built,
    )
    .await
}

/// The image of a compose service: its `build`, its `image` (mapped; pulled when missing), or
/// for Harbor's main service, the task's environment image.
pub(super) async fn service_image(
    docker: &Docker,
    task: &BenchTask,
    service: &Service,
    fallback: Option<&MainImage>,
    settings: &BuildSettings,
    note: &(dyn Fn(&str) + Sync),
    built: &mut Vec<(String, Built)>,
) -> Failed<String> {
    if let Some(build_spec) = &service.build {
        return build(
            docker,
            task,
            &service.name,
            &build_spec.context,
            &build_spec.dockerfile,
            &build_spec.args,
            settings,
            note,
            built,
        )
        .await;
    }
    if let Some(name) = &service.image {
        let mapped = settings.map_image(name);
        if docker.inspect_image(&mapped).await.is_err() {
            // Harbor's main service names its prebuilt image with a variable: build instead.
            if let Some(main) = fallback {
                return resolve_main(docker, task, main, settings, note, built).await;
            }
            pull(docker, &mapped, note).await?;
        }
        return Ok(mapped);
    }
    match fallback {
        Some(main) => resolve_main(docker, task, main, settings, note, built).await,
        None => failed!("services.{}: needs `image` or `build`", service.name),
    }
}

#[allow(clippy::too_many_arguments)]
async fn build(
    docker: &Docker,
    task: &BenchTask,
    service: &str,
    context: &Path,
    dockerfile: &Path,
    args: &BTreeMap<String, String>,
    settings: &BuildSettings,
    note: &(dyn Fn(&str) + Sync),
    built: &mut Vec<(String, Built)>,
) -> Failed<String> {
    let name = if service == "main" {
        task.name.clone()
    } else {
        format!("{}-{service}", task.name)
    };
    note(&format!("image: building {name} (or finding it cached)"));
    let result = image::build(
        docker,
        &name,
        context,
        dockerfile,
        args,
        settings,
        task.build_timeout,
    )
    .await
    .doing_with(|| format!("building the image of {name}"))?;
    note(&format!(
        "image: {} {} ({:.1} s)",
        result.tag,
        if result.cached { "cached" } else { "built" },
        result.duration.as_secs_f64()
    ));
    let tag = result.tag.clone();
    built.push((service.to_owned(), result));
    Ok(tag)
}

/// Pulls an image the engine lacks; offline this fails, naming `--image-map` as the way out.
async fn pull(docker: &Docker, image: &str, note: &(dyn Fn(&str) + Sync)) -> Failed<()> {
    note(&format!("image: pulling {image}"));
    let options = CreateImageOptionsBuilder::new().from_image(image).build();
    let mut stream = docker.create_image(Some(options), None, None);
    while let Some(item) = stream.next().await {
        if let Err(err) = item {
            failed!(
                "the image {image} is not on the engine and could not be pulled ({err}); build it, load it, or point --image-map {image}=… at one the engine has"
            );
        }
    }
    Ok(())
}

/// The task's compose file, read with Harbor's and TB1's variables.
pub(super) fn load_compose(task: &BenchTask, file: &Path, session_id: &str) -> Failed<Compose> {
    Ok(compose::load(
        file,
        &super::compose_vars(task, session_id),
        &task.dir,
    )?)
}

/// Starts every service but `main` in dependency order, each once what it depends on is
/// started, healthy or completed as asked; then waits for what `main` depends on. Their
/// container ids go into the environment as they are made (its removal finds them).
pub(super) async fn start_sidecars(
    environment: &mut TaskEnvironment,
    compose: &Compose,
    main: &str,
    spec: &StartSpec<'_>,
) -> Failed<()> {
    let deadline = Instant::now() + spec.task.build_timeout.max(Duration::from_secs(60));
    let mut ids: BTreeMap<String, String> = BTreeMap::new();
    for name in order(compose, main)? {
        let service = &compose.services[&name];
        wait_dependencies(&environment.docker, service, &ids, deadline).await?;
        let image = service_image(
            &environment.docker,
            spec.task,
            service,
            None,
            spec.settings,
            spec.note,
            &mut environment.built,
        )
        .await?;
        let id = create_sidecar(environment, service, &image, spec.session_id).await?;
        ids.insert(name.clone(), id.clone());
        environment.sidecars.push(id.clone());
        environment.services.insert(name.clone(), id.clone());
        environment
            .docker
            .start_container(&id, None)
            .await
            .doing_with(|| format!("starting the service {name}"))?;
    }
    if let Some(main_service) = compose.services.get(main) {
        wait_dependencies(&environment.docker, main_service, &ids, deadline).await?;
    }
    Ok(())
}

async fn wait_dependencies(
    docker: &Docker,
    service: &Service,
    ids: &BTreeMap<String, String>,
    deadline: Instant,
) -> Failed<()> {
    for (dependency, condition) in &service.depends_on {
        if let Some(id) = ids.get(dependency) {
            wait_for(docker, id, dependency, *condition, deadline)
                .await
                .doing_with(|| format!("services.{}.depends_on.{dependency}", service.name))?;
        }
    }
    Ok(())
}

/// The services but `main`, each after what it depends on.
fn order(compose: &Compose, main: &str) -> Failed<Vec<String>> {
    let mut order: Vec<String> = Vec::new();
    let mut visiting: BTreeSet<String> = BTreeSet::new();
    fn visit(
        name: &str,
        compose: &Compose,
        main: &str,
        order: &mut Vec<String>,
        visiting: &mut BTreeSet<String>,
    ) -> Failed<()> {
        if order.iter().any(|n| n == name) || name == main {
            return Ok(());
        }
        if !visiting.insert(name.to_owned()) {
            failed!("services.{name}: depends_on makes a cycle");
        }
        for (dependency, _) in &compose.services[name].depends_on {
            if dependency == main {
                failed!("services.{name} depends on the main service, which starts last");
            }
            visit(dependency, compose, main, order, visiting)?;
        }
        order.push(name.to_owned());
        Ok(())
    }
    for name in compose.services.keys() {
        visit(name, compose, main, &mut order, &mut visiting)?;
    }
    Ok(order)
}

async fn create_sidecar(
    environment: &TaskEnvironment,
    service: &Service,
    image: &str,
    session_id: &str,
) -> Failed<String> {
    let nanos = |d: Option<Duration>| d.map(|d| d.as_nanos() as i64);
    let healthcheck = service.healthcheck.as_ref().map(|check| HealthConfig {
        test: Some(check.test.clone()),
        interval: nanos(check.interval),
        timeout: nanos(check.timeout),
        retries: check.retries,
        start_period: nanos(check.start_period),
        ..Default::default()
    });
    let body = ContainerCreateBody {
        image: Some(image.to_owned()),
        cmd: service.command.clone(),
        entrypoint: service.entrypoint.clone(),
        env: Some(
            service
                .environment
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .chain(environment.proxy_environment())
                .collect(),
        ),
        working_dir: service.working_dir.clone(),
        user: service.user.clone(),
        healthcheck,
        labels: Some(labels_for(session_id, None)),
        host_config: Some(HostConfig {
            memory: service.memory_bytes,
            nano_cpus: service.cpus.map(|c| (c * 1e9) as i64),
            binds: Some(service.binds.clone()).filter(|b| !b.is_empty()),
            network_mode: Some(environment.network.clone()),
            ..Default::default()
        }),
        networking_config: Some(networking(&environment.network, &service.name)),
        ..Default::default()
    };
    let name = format!("harness-{session_id}-{}", service.name);
    super::create_named(&environment.docker, &name, body)
        .await
        .doing_with(|| format!("creating the service {}", service.name))
}

/// Waits until a service is started, healthy or exited 0, as `condition` asks.
async fn wait_for(
    docker: &Docker,
    id: &str,
    name: &str,
    condition: Condition,
    deadline: Instant,
) -> Failed<()> {
    loop {
        let inspect = docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await?;
        let state = inspect.state.unwrap_or_default();
        let running = state.running.unwrap_or(false);
        let done = match condition {
            Condition::Started => true,
            Condition::Healthy => matches!(
                state.health.and_then(|h| h.status),
                Some(HealthStatusEnum::HEALTHY)
            ),
            Condition::CompletedSuccessfully => !running && state.exit_code == Some(0),
        };
        if done {
            return Ok(());
        }
        if !running && condition != Condition::CompletedSuccessfully {
            failed!(
                "the service {name} exited ({:?}) before it was {condition:?}; its last lines:\n{}",
                state.exit_code,
                logs(docker, id).await
            );
        }
        if condition == Condition::CompletedSuccessfully
            && !running
            && state.exit_code.is_some_and(|c| c != 0)
        {
            failed!("the service {name} exited with {:?}", state.exit_code);
        }
        if Instant::now() >= deadline {
            failed!("the service {name} was not {condition:?} in time");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A container's state.
pub(super) async fn state(docker: &Docker, id: &str) -> Failed<ContainerState> {
    harness_runtime::sandbox::docker::container_state(docker, id)
        .await
        .doing("inspecting the task's container")
}

/// A container's last 20 lines.
pub(super) async fn logs(docker: &Docker, id: &str) -> String {
    let options = LogsOptionsBuilder::new()
        .stdout(true)
        .stderr(true)
        .tail("20")
        .build();
    let mut stream = docker.logs(id, Some(options));
    let mut text = String::new();
    while let Some(Ok(chunk)) = stream.next().await {
        text.push_str(&chunk.to_string());
    }
    text.trim_end().to_owned()
}

/// Every image a task's containers run, built (or found, or pulled) without starting
/// anything: the main container's, then its sidecars'. Returns the main image, the images
/// built, and the sidecars' names.
pub async fn build_images(
    task: &BenchTask,
    settings: &BuildSettings,
    note: &(dyn Fn(&str) + Sync),
) -> Failed<(String, Vec<(String, Built)>, Vec<String>)> {
    let docker = harness_runtime::sandbox::docker::connect().await?;
    let mut built = Vec::new();
    match &task.environment {
        super::super::Environment::Single(image) => {
            let main = resolve_main(&docker, task, image, settings, note, &mut built).await?;
            Ok((main, built, Vec::new()))
        }
        super::super::Environment::Compose {
            file,
            main,
            main_image,
        } => {
            let compose = load_compose(task, file, "build")?;
            let mut sidecars = Vec::new();
            for (name, service) in compose.services.iter().filter(|(name, _)| *name != main) {
                service_image(&docker, task, service, None, settings, note, &mut built).await?;
                sidecars.push(name.clone());
            }
            let service = compose
                .services
                .get(main)
                .ok_or_else(|| failure!("{}: no `{main}` service", file.display()))?;
            let image = service_image(
                &docker,
                task,
                service,
                main_image.as_ref(),
                settings,
                note,
                &mut built,
            )
            .await?;
            Ok((image, built, sidecars))
        }
    }
}
