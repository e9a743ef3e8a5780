//! `harness images build`: the edge of `harness_benchmark::publish`.

use std::path::Path;

use crate::exit_code;
use harness_benchmark::flags::Agent;
use harness_benchmark::publish::{self, Overlay};
use harness_runtime::task::{TaskSource, discover};

use super::ImagesCommand;

pub(crate) async fn run(command: ImagesCommand) -> anyhow::Result<i32> {
    let ImagesCommand::Build {
        datasets,
        push,
        kustomize,
        kustomize_base,
        agent,
        attempts,
        build,
    } = command;
    agent.parse::<Agent>().map_err(anyhow::Error::msg)?;
    if attempts == 0 {
        anyhow::bail!("--attempts must be at least 1");
    }
    if kustomize.is_some() && !kustomize_base.join("kustomization.yaml").is_file() {
        anyhow::bail!(
            "--kustomize-base {}: no kustomization.yaml there (run from the repository, or point at deploy/benchmark)",
            kustomize_base.display()
        );
    }
    let settings = harness_benchmark::run::build_settings(&build.flags())?;
    let note = |line: &str| eprintln!("{line}");
    let mut failed = 0;
    for dataset in &datasets {
        for found in discover(
            std::slice::from_ref(dataset),
            harness_benchmark::TASK_FOLDERS,
        )? {
            let TaskSource::Folder(dir) = &found.source else {
                continue;
            };
            let task =
                harness_benchmark::load(dir, &found.name, &harness_benchmark::HostVars::none())?;
            let images =
                match publish::build_and_push(&task, &settings, push.as_deref(), &note).await {
                    Ok(images) => images,
                    Err(err) => {
                        eprintln!("{}: {err:#}", found.name);
                        failed += 1;
                        continue;
                    }
                };
            println!(
                "{}\t{}",
                found.name,
                images.pushed.as_deref().unwrap_or(&images.image)
            );
            if let Some(out) = &kustomize {
                let task_path = task_path(dataset, dir);
                let overlay = Overlay {
                    task: &task,
                    images: &images,
                    task_path: &task_path,
                    agent: &agent,
                    trials: attempts,
                };
                match publish::write_overlay(out, &kustomize_base, &overlay) {
                    Ok(path) => eprintln!("overlay: {}", path.display()),
                    Err(err) => eprintln!("{}: no overlay: {err:#}", found.name),
                }
            }
        }
    }
    Ok(if failed > 0 {
        exit_code::ERROR
    } else {
        exit_code::COMPLETED
    })
}

/// The task's folder as the datasets volume holds it: the dataset folder's name, then the
/// task's path within it.
fn task_path(dataset: &Path, task: &Path) -> String {
    let dataset = std::path::absolute(dataset).unwrap_or_else(|_| dataset.to_owned());
    let root = dataset.parent().map(Path::to_owned).unwrap_or_default();
    task.strip_prefix(&root)
        .map_or_else(|_| task.display().to_string(), |p| p.display().to_string())
}
