//! `replay fork --sandbox docker`: container children started from one image of the workspace
//! at the step (committed once, the files' verified hashes listed in it), kept with
//! `--keep-state` and found again, removed without; an image that cannot hold the workspace
//! that way gets it uploaded into each child instead. Needs the engine and the sandbox image
//! (`HARNESS_TEST_DOCKER=1`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use harness_runtime::sandbox::docker::fork_image;
use serde_json::Value;

use crate::common::{self, events};
use crate::forks::{first, recorded, restored, seq_of};

/// `replay fork LOG --step SEQ --count 2 --sandbox docker --trust-log` (the log is the test's
/// own) and `more`, into `out`.
async fn fork(log: &Path, seq: u64, out: &Path, more: &[&str]) -> common::Run {
    let seq = seq.to_string();
    let mut args = vec![
        "replay",
        "fork",
        log.to_str().unwrap(),
        "--step",
        &seq,
        "--count",
        "2",
        "--sandbox",
        "docker",
        "--out",
        out.to_str().unwrap(),
        "--trust-log",
    ];
    args.extend_from_slice(more);
    let run = common::harness(&args, Duration::from_secs(240)).await;
    assert_eq!(run.code, 0, "fork failed: {}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("2 of 2 passed"), "{}", run.stdout);
    run
}

/// `docker build` of `dockerfile` in the new folder `context`, tagged `tag`.
fn build_image(context: &Path, dockerfile: &str, tag: &str) {
    std::fs::create_dir(context).unwrap();
    std::fs::write(context.join("Dockerfile"), dockerfile).unwrap();
    let built = Command::new("docker")
        .args(["build", "-q", "-t", tag])
        .arg(context)
        .output()
        .unwrap();
    assert!(built.status.success(), "{built:?}");
}

/// The fork images labelled with this session and step: (tag, files its list names).
fn images_of(session: &str, seq: u64) -> Vec<(String, String)> {
    let label = format!("label=agent-harness.fork-state={session}@{seq}");
    let output = Command::new("docker")
        .args([
            "images",
            "--filter",
            &label,
            "--format",
            "{{.Repository}}:{{.Tag}}",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|tag| !tag.contains("<none>"))
        .map(|tag| {
            let known = Command::new("docker")
                .args([
                    "image",
                    "inspect",
                    "--format",
                    "{{index .Config.Labels \"agent-harness.fork-state.known\"}}",
                    tag,
                ])
                .output()
                .unwrap();
            (
                tag.to_owned(),
                String::from_utf8_lossy(&known.stdout).trim().to_owned(),
            )
        })
        .collect()
}

/// Each child of the fork in `out` passed, and its workspace began as `at_step`, file for file.
async fn children_began_at(
    out: &Path,
    at_step: &std::collections::BTreeMap<String, Vec<u8>>,
    scratch: &Path,
) {
    for child in 1..=2 {
        let log = out.join(format!("child-{child}"));
        let all = events(&log);
        assert_eq!(all[0]["data"]["config"]["sandbox"], "docker");
        let snapshot = first(&all, "workspace_snapshot", |_| true);
        let to = scratch.join(format!(
            "{}-child-{child}",
            out.file_name().unwrap().to_str().unwrap()
        ));
        let began = restored(&log, seq_of(snapshot), &to).await;
        assert_eq!(&began, at_step, "child {child}'s initial workspace");
        let check = first(&all, "check_result", |_| true);
        assert_eq!(check["data"]["passed"], true);
    }
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_docker),
    ignore = "needs HARNESS_TEST_DOCKER=1 (bash .ci/run sets it up)"
)]
async fn container_children_start_from_one_image_of_the_workspace_kept_or_removed() {
    let dir = tempfile::tempdir().unwrap();
    let (log, all) = recorded(dir.path()).await;
    let session = all[0]["data"]["session_id"].as_str().unwrap().to_owned();
    // After the second change: a.txt and b.txt written, the rest to come.
    let seq = all
        .iter()
        .filter(|e| e["type"] == "workspace_changed")
        .map(seq_of)
        .nth(1)
        .unwrap();
    let at_step = restored(&log, seq, &dir.path().join("at-step")).await;
    assert!(at_step.contains_key("b.txt"), "{at_step:?}");

    // Kept: the image made now lists every file's hash, and stays.
    let kept = fork(&log, seq, &dir.path().join("kept"), &["--keep-state"]).await;
    assert!(
        kept.stderr
            .contains("containers of agent-harness/fork-state:")
            && kept.stderr.contains("(made now)")
            && kept.stderr.contains("every file's verified hash"),
        "{}",
        kept.stderr
    );
    children_began_at(&dir.path().join("kept"), &at_step, dir.path()).await;
    let images = images_of(&session, seq);
    assert_eq!(images.len(), 1, "{images:?}");
    assert_eq!(images[0].1, at_step.len().to_string(), "{images:?}");

    // Found again by the next fork of the step, and left for the one after.
    let again = fork(&log, seq, &dir.path().join("again"), &[]).await;
    assert!(
        again.stderr.contains("(kept from an earlier fork)"),
        "{}",
        again.stderr
    );
    children_began_at(&dir.path().join("again"), &at_step, dir.path()).await;
    assert_eq!(images_of(&session, seq), images);

    // Without it, the image goes with the fork.
    let removed = Command::new("docker")
        .args(["rmi", &images[0].0])
        .output()
        .unwrap();
    assert!(removed.status.success(), "{removed:?}");
    let once = fork(&log, seq, &dir.path().join("once"), &[]).await;
    assert!(once.stderr.contains("(made now)"), "{}", once.stderr);
    children_began_at(&dir.path().join("once"), &at_step, dir.path()).await;
    assert_eq!(images_of(&session, seq), Vec::new());
    let leftovers = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=agent-harness.fork-state={session}@{seq}"),
        ])
        .output()
        .unwrap();
    assert!(leftovers.stdout.is_empty(), "{leftovers:?}");

    // An image whose workspace has a file of its own cannot take the workspace by adding to
    // it: each child gets it uploaded (which replaces the image's), said, and is still exact.
    let tag = format!("harness-test/fork-busy-workspace:{}", std::process::id());
    build_image(
        &dir.path().join("image"),
        "FROM agent-harness/sandbox\nRUN echo stale > /workspace/stale.txt\n",
        &tag,
    );
    let busy = fork(&log, seq, &dir.path().join("busy"), &["--image", &tag]).await;
    let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
    assert!(
        busy.stderr.contains("workspace /workspace is not empty")
            && busy
                .stderr
                .contains("each child gets the workspace uploaded"),
        "{}",
        busy.stderr
    );
    children_began_at(&dir.path().join("busy"), &at_step, dir.path()).await;
    assert_eq!(images_of(&session, seq), Vec::new());
    let parsed: Vec<Value> = events(&dir.path().join("busy"));
    assert_eq!(parsed.last().unwrap()["type"], "batch_finished");
}

/// A fork killed before it removed its image leaves it for `sandboxes prune`, which removes it
/// once its fork is gone; an image kept with `--keep-state` stays (until `--all`).
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    not(harness_docker),
    ignore = "needs HARNESS_TEST_DOCKER=1 (bash .ci/run sets it up)"
)]
async fn prune_removes_the_image_of_a_killed_fork_and_keeps_a_kept_one() {
    let dir = tempfile::tempdir().unwrap();
    // A pid that no process has: a finished child's.
    let gone = {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    };
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let suffix = std::process::id();
    let build = |name: &str, kept: bool| {
        let mut labels = format!(
            "LABEL agent-harness.managed=true agent-harness.fork-state=s-{suffix}@{name} \
             agent-harness.controller.host={host} agent-harness.controller.pid={gone} \
             agent-harness.controller.pid-start=1\n"
        );
        if kept {
            labels.push_str("LABEL agent-harness.fork-state.kept=true\n");
        }
        let tag = format!("agent-harness/fork-state:test-{name}-{suffix}");
        let dockerfile = format!("FROM agent-harness/sandbox\n{labels}");
        build_image(&dir.path().join(name), &dockerfile, &tag);
        tag
    };
    let (left, kept, held) = (
        build("left", false),
        build("kept", true),
        build("held", false),
    );
    // A fork that found `held` (left by a killed fork) holds it while its children run.
    let holding = fork_image::existing(&held, "s-held")
        .await
        .unwrap()
        .unwrap();
    assert!(holding.reused && holding.holder.is_some());
    let exists = |tag: &str| {
        Command::new("docker")
            .args(["image", "inspect", tag])
            .output()
            .unwrap()
            .status
            .success()
    };
    let first = common::harness(&["sandboxes", "prune"], Duration::from_secs(60)).await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert!(
        first.stdout.contains(&format!("image {left}"))
            && first
                .stdout
                .contains(&format!("its fork (pid {gone}) is gone")),
        "{}",
        first.stdout
    );
    assert!(!exists(&left), "prune left {left}");
    // What it keeps it says on stderr.
    assert!(
        first.stderr.contains(&format!("kept image {kept}"))
            && first.stderr.contains("kept by `replay fork --keep-state`"),
        "{}",
        first.stderr
    );
    assert!(exists(&kept), "prune removed the kept {kept}");
    assert!(
        exists(&held) && first.stderr.contains(&format!("kept image {held}")),
        "prune removed the image a live fork holds: {}",
        first.stderr
    );
    // Once the fork lets go, the next prune takes it.
    fork_image::release(&holding).await;
    let second = common::harness(&["sandboxes", "prune"], Duration::from_secs(60)).await;
    assert!(
        second.stdout.contains(&format!("image {held}")),
        "{}",
        second.stdout
    );
    assert!(!exists(&held), "prune left {held}");
    // (`prune --all` would take it, and every other test's containers with it.)
    let _ = Command::new("docker").args(["rmi", &kept]).output();
}
