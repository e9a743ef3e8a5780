//! `harness images build`: a dataset's task images built ahead of a run (for a cluster that
//! cannot build), pushed to a registry, and one kustomize overlay per task of
//! `deploy/benchmark` (an Indexed Job over the task's trials in its own image).

use std::path::{Path, PathBuf};

use crate::error::{Doing, Failed, failed};
use bollard::query_parameters::{PushImageOptionsBuilder, TagImageOptionsBuilder};
use futures::StreamExt;

use super::BenchTask;
use super::container::build_images;
use super::image::{BuildSettings, Built};

/// What was built for one task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskImages {
    pub task: String,
    /// The main container's image, here.
    pub image: String,
    /// Where it was pushed, when it was.
    pub pushed: Option<String>,
    pub built: Vec<(String, Built)>,
    /// Compose services besides the main one (the Job variant runs the main container only).
    pub sidecars: Vec<String>,
}

/// Builds a task's images, and pushes the main one to `registry` when given.
pub async fn build_and_push(
    task: &BenchTask,
    settings: &BuildSettings,
    registry: Option<&str>,
    note: &(dyn Fn(&str) + Sync),
) -> Failed<TaskImages> {
    let (image, built, sidecars) = build_images(task, settings, note).await?;
    let pushed = match registry {
        Some(registry) => Some(push(&image, registry, note).await?),
        None => None,
    };
    Ok(TaskImages {
        task: task.name.clone(),
        image,
        pushed,
        built,
        sidecars,
    })
}

/// Tags `image` as `<registry>/<its repository>:<its tag>` and pushes it.
async fn push(image: &str, registry: &str, note: &(dyn Fn(&str) + Sync)) -> Failed<String> {
    let docker = harness_runtime::sandbox::docker::connect().await?;
    let (repository, tag) = match image.rsplit_once(':').filter(|(_, t)| !t.contains('/')) {
        Some((repository, tag)) => (repository, tag),
        None => (image, "latest"),
    };
    let remote = format!("{}/{repository}", registry.trim_end_matches('/'));
    docker
        .tag_image(
            image,
            Some(TagImageOptionsBuilder::new().repo(&remote).tag(tag).build()),
        )
        .await
        .doing_with(|| format!("tagging {image} as {remote}:{tag}"))?;
    note(&format!("image: pushing {remote}:{tag}"));
    let mut stream = docker.push_image(
        &remote,
        Some(PushImageOptionsBuilder::new().tag(tag).build()),
        None,
    );
    while let Some(item) = stream.next().await {
        item.doing_with(|| format!("pushing {remote}:{tag}"))?;
    }
    Ok(format!("{remote}:{tag}"))
}

/// A Kubernetes name for a task: lowercase letters, digits and `-`, at most 40 characters.
pub fn k8s_name(task: &str) -> String {
    let name: String = task
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let name = name.trim_matches('-');
    name[..name.len().min(40)].trim_end_matches('-').to_owned()
}

/// What an overlay says about its task.
pub struct Overlay<'a> {
    pub task: &'a BenchTask,
    pub images: &'a TaskImages,
    /// The task's folder as the controller's dataset volume holds it.
    pub task_path: &'a str,
    pub agent: &'a str,
    pub trials: u32,
}

/// Writes `<dir>/<task>/kustomization.yaml`, an overlay of `base` (deploy/benchmark).
pub fn write_overlay(dir: &Path, base: &Path, overlay: &Overlay<'_>) -> Failed<PathBuf> {
    if !overlay.images.sidecars.is_empty() {
        failed!(
            "{}: its compose services ({}) are not in the Job variant, which runs the main container only",
            overlay.task.name,
            overlay.images.sidecars.join(", ")
        );
    }
    let name = k8s_name(&overlay.task.name);
    let folder = dir.join(&name);
    std::fs::create_dir_all(&folder).doing_with(|| format!("creating {}", folder.display()))?;
    let base = std::path::absolute(base)?;
    let relative = relative_path(&std::path::absolute(&folder)?, &base);
    let reference = overlay
        .images
        .pushed
        .as_deref()
        .unwrap_or(&overlay.images.image);
    let (image_name, image_tag) = reference.rsplit_once(':').unwrap_or((reference, "latest"));
    let resources = &overlay.task.resources;
    let cpus = resources.cpus.unwrap_or(1.0);
    let memory = resources.memory_mb.unwrap_or(2048);
    let text = format!(
        "# Written by `harness images build`: the task {task} in its own image, {trials} trial(s)\n\
         # (an Indexed Job of {base_name}). Apply with `kubectl apply -k {folder}`.\n\
         apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {relative}\n\
         nameSuffix: -{name}\n\
         configMapGenerator:\n  - name: benchmark-task\n    behavior: replace\n    literals:\n\
         \x20     - TASK={name}\n      - TASK_PATH={task_path}\n      - AGENT={agent}\n\
         images:\n  - name: harness-task/task\n    newName: {image_name}\n    newTag: \"{image_tag}\"\n\
         patches:\n  - target: {{kind: Job, name: harness-task}}\n    patch: |-\n\
         \x20     - {{op: replace, path: /spec/completions, value: {trials}}}\n\
         \x20     - {{op: replace, path: /spec/parallelism, value: {trials}}}\n\
         \x20     - op: replace\n        path: /spec/template/spec/initContainers/2/resources\n\
         \x20       value: {{requests: {{cpu: \"{cpus}\", memory: {memory}Mi}}, limits: {{cpu: \"{cpus}\", memory: {memory}Mi}}}}\n",
        task = overlay.task.name,
        trials = overlay.trials,
        base_name = base.display(),
        folder = folder.display(),
        task_path = overlay.task_path,
        agent = overlay.agent,
    );
    let path = folder.join("kustomization.yaml");
    std::fs::write(&path, text).doing_with(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// `to` relative to `from` (both absolute).
fn relative_path(from: &Path, to: &Path) -> String {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".to_owned(); from.len() - common];
    parts.extend(
        to[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths_for_kubernetes() {
        assert_eq!(k8s_name("Hello_World/x"), "hello-world-x");
        assert_eq!(
            relative_path(Path::new("/a/b/c"), Path::new("/a/d")),
            "../../d"
        );
        assert_eq!(relative_path(Path::new("/a"), Path::new("/a/d/e")), "d/e");
    }
}
