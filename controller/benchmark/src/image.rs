//! A task's images, built through the Engine API and cached by content: the tag is a hash of
//! the build context's files (paths, modes, bytes), the rewritten Dockerfile and the build
//! arguments, so a second run finds the image and builds nothing.
//!
//! Two rewrites make builds work where public task images cannot be pulled or verified:
//! `--image-map FROM=TO` replaces image references in `FROM` lines (and compose `image:`), and
//! `--build-ca FILE` copies a CA bundle into every stage and points the usual variables at it
//! for the build's `RUN` steps (as build arguments, so the final image's environment is the
//! task's). The host's proxy variables are passed as build arguments too.

mod context;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Context, Doing, Failed, TaskResult, bail, failed, failure};
use bollard::Docker;
use bollard::query_parameters::BuildImageOptionsBuilder;
use futures::StreamExt;
use sha2::{Digest, Sha256};

use context::{ContextFile, context_files, context_tar};

/// How builds are rewritten.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildSettings {
    /// `FROM` → replacement, exact; a key ending in `/` replaces that prefix.
    pub image_map: Vec<(String, String)>,
    /// A CA bundle added to every build.
    pub ca_bundle: Option<Vec<u8>>,
}

/// What a build did.
#[derive(Debug, Clone, PartialEq)]
pub struct Built {
    pub tag: String,
    pub cached: bool,
    pub duration: Duration,
    /// The builder's output (empty when cached).
    pub output: String,
}

const CA_IN_CONTEXT: &str = ".harness-build-ca.crt";
const CA_IN_IMAGE: &str = "/usr/local/share/ca-certificates/harness-build-ca.crt";
const DOCKERFILE_IN_CONTEXT: &str = ".harness.Dockerfile";
const CA_VARIABLES: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
];
const PROXY_VARIABLES: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

impl BuildSettings {
    /// An image reference as the map rewrites it.
    pub fn map_image(&self, image: &str) -> String {
        for (from, to) in &self.image_map {
            if image == from {
                return to.clone();
            }
            if from.ends_with('/')
                && let Some(rest) = image.strip_prefix(from.as_str())
            {
                return format!("{to}{rest}");
            }
        }
        image.to_owned()
    }

    /// Reads `FROM=TO` lines (blank lines and `#` comments skipped) into the map.
    pub fn read_map_file(&mut self, file: &Path) -> TaskResult<()> {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let pair =
                parse_mapping(line).with_context(|| format!("{}:{}", file.display(), n + 1))?;
            self.image_map.push(pair);
        }
        Ok(())
    }

    /// The Dockerfile with its `FROM` images mapped and the CA added after each `FROM`.
    pub fn rewrite(&self, dockerfile: &str) -> String {
        let mut out = String::with_capacity(dockerfile.len() + 512);
        for line in dockerfile.lines() {
            let trimmed = line.trim_start();
            let is_from = trimmed.len() > 5 && trimmed[..5].eq_ignore_ascii_case("FROM ");
            if !is_from {
                out.push_str(line);
                out.push('\n');
                continue;
            }
            let words: Vec<&str> = trimmed.split_whitespace().collect();
            // FROM [--platform=…] IMAGE [AS name]
            let image_at = words
                .iter()
                .skip(1)
                .position(|w| !w.starts_with("--"))
                .map(|p| p + 1);
            let rewritten: Vec<String> = words
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    if Some(i) == image_at {
                        self.map_image(w)
                    } else {
                        (*w).to_owned()
                    }
                })
                .collect();
            out.push_str(&rewritten.join(" "));
            out.push('\n');
            if self.ca_bundle.is_some() {
                out.push_str(&format!("COPY {CA_IN_CONTEXT} {CA_IN_IMAGE}\n"));
                for variable in CA_VARIABLES {
                    out.push_str(&format!("ARG {variable}={CA_IN_IMAGE}\n"));
                }
            }
        }
        out
    }
}

/// `FROM=TO`.
pub fn parse_mapping(text: &str) -> TaskResult<(String, String)> {
    match text.split_once('=') {
        Some((from, to)) if !from.trim().is_empty() && !to.trim().is_empty() => {
            Ok((from.trim().to_owned(), to.trim().to_owned()))
        }
        _ => bail!(
            "`{text}`: an image mapping is FROM=TO, e.g. python:3.12-slim=registry.local/python:3.12-slim"
        ),
    }
}

/// One build at a time per tag: parallel trials of a task wait for the first build.
static BUILDING: LazyLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Builds (or finds) the image of `dockerfile` with `context`, tagged by content.
pub async fn build(
    docker: &Docker,
    name: &str,
    context: &Path,
    dockerfile: &Path,
    args: &BTreeMap<String, String>,
    settings: &BuildSettings,
    timeout: Duration,
) -> Failed<Built> {
    let started = Instant::now();
    let text = std::fs::read_to_string(dockerfile)
        .doing_with(|| format!("reading {}", dockerfile.display()))?;
    let rewritten = settings.rewrite(&text);
    let files = context_files(context)?;
    let tag = tag_for(name, &files, &rewritten, args, settings);
    let lock = {
        let mut building = BUILDING.lock().unwrap_or_else(|p| p.into_inner());
        building.entry(tag.clone()).or_default().clone()
    };
    let _guard = lock.lock().await;
    if docker.inspect_image(&tag).await.is_ok() {
        return Ok(Built {
            tag,
            cached: true,
            duration: started.elapsed(),
            output: String::new(),
        });
    }
    missing_own_bases(docker, &rewritten).await?;
    let body = context_tar(&files, &rewritten, settings.ca_bundle.as_deref())
        .doing("packing the build context")?;
    let mut buildargs: HashMap<String, String> = args.clone().into_iter().collect();
    for variable in PROXY_VARIABLES {
        // A proxy that carries credentials (`http://user:pass@proxy`) is this machine's
        // secret, not the task's: a task's Dockerfile could keep it in its image.
        if let Ok(value) = std::env::var(variable)
            && !value.contains('@')
        {
            buildargs.entry((*variable).to_owned()).or_insert(value);
        }
    }
    let options = BuildImageOptionsBuilder::new()
        .dockerfile(DOCKERFILE_IN_CONTEXT)
        .t(&tag)
        .rm(true)
        .forcerm(true)
        .buildargs(&buildargs)
        .build();
    let output = tokio::time::timeout(timeout, stream_build(docker, options, body))
        .await
        .map_err(|_| {
            failure!(
                "building {name} took longer than its build timeout ({} s)",
                timeout.as_secs()
            )
        })??;
    Ok(Built {
        tag,
        cached: false,
        duration: started.elapsed(),
        output,
    })
}

/// The images a Dockerfile's `FROM` lines name (not `scratch`, not an earlier stage).
fn from_images(dockerfile: &str) -> Vec<String> {
    let mut stages: Vec<String> = Vec::new();
    let mut images = Vec::new();
    for line in dockerfile.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if !words
            .first()
            .is_some_and(|w| w.eq_ignore_ascii_case("FROM"))
        {
            continue;
        }
        let mut rest = words[1..].iter().filter(|w| !w.starts_with("--"));
        let Some(image) = rest.next() else { continue };
        if *image != "scratch" && !stages.iter().any(|s| s.eq_ignore_ascii_case(image)) {
            images.push((*image).to_owned());
        }
        if let (Some(as_), Some(stage)) = (rest.next(), rest.next())
            && as_.eq_ignore_ascii_case("AS")
        {
            stages.push((*stage).to_owned());
        }
    }
    images
}

/// This project's own base images are made here, never pulled: one that is missing is named
/// with the command that makes it, instead of the engine's failed lookup of a registry.
async fn missing_own_bases(docker: &Docker, dockerfile: &str) -> Failed<()> {
    for image in from_images(dockerfile) {
        if image.starts_with("agent-harness/") && docker.inspect_image(&image).await.is_err() {
            failed!(
                "the image {image} (a FROM of this task) is not on this Docker engine, and no \
                 registry has it: make it with docker/build-base-image.sh {image} (or run \
                 examples/benchmarks/run.sh, which makes what is missing)"
            );
        }
    }
    Ok(())
}

pub(crate) async fn stream_build(
    docker: &Docker,
    options: bollard::query_parameters::BuildImageOptions,
    body: Vec<u8>,
) -> Failed<String> {
    let mut stream = docker.build_image(options, None, Some(bollard::body_full(body.into())));
    let mut output = String::new();
    while let Some(item) = stream.next().await {
        let info = item.doing("the Docker engine's build stream")?;
        if let Some(text) = info.stream {
            output.push_str(&text);
        }
        if let Some(error) = info.error_detail.and_then(|e| e.message) {
            let tail: Vec<&str> = output
                .lines()
                .rev()
                .take(15)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            failed!("the image build failed: {error}\n{}", tail.join("\n"));
        }
    }
    Ok(output)
}

fn tag_for(
    name: &str,
    files: &[ContextFile],
    dockerfile: &str,
    args: &BTreeMap<String, String>,
    settings: &BuildSettings,
) -> String {
    let mut hasher = Sha256::new();
    for (rel, mode, bytes) in files {
        hasher.update(format!(
            "{rel}\0{mode:o}\0{}\n",
            hex::encode(Sha256::digest(bytes))
        ));
    }
    hasher.update(b"\0dockerfile\0");
    hasher.update(dockerfile.as_bytes());
    for (key, value) in args {
        hasher.update(format!("\0arg\0{key}={value}"));
    }
    if let Some(ca) = &settings.ca_bundle {
        hasher.update(b"\0ca\0");
        hasher.update(ca);
    }
    let safe: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!(
        "harness-task/{}:{}",
        safe.trim_matches(['-', '.']),
        &hex::encode(hasher.finalize())[..16]
    )
}

#[cfg(test)]
mod tests {
    use super::context::LINK_MODE;
    use super::*;

    /// Issue 24 §3: a link in a build context is sent as a link, and one that leaves the
    /// context refuses the build: no file of this machine reaches a task's image.
    #[test]
    fn a_dockerfiles_base_images_are_its_from_lines_without_its_stages() {
        let text = "FROM --platform=linux/amd64 agent-harness/base:bookworm AS build\nRUN x\nFROM scratch\nFROM build\nfrom python:3.12 as py\n";
        assert_eq!(
            from_images(text),
            ["agent-harness/base:bookworm", "python:3.12"]
        );
    }

    #[test]
    fn a_build_context_never_follows_a_link_out_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let context = dir.path().join("environment");
        std::fs::create_dir(&context).unwrap();
        std::fs::write(context.join("Dockerfile"), "FROM x\n").unwrap();
        std::fs::write(dir.path().join("id_rsa"), "PRIVATE KEY").unwrap();
        std::os::unix::fs::symlink("Dockerfile", context.join("inside")).unwrap();
        let files = context_files(&context).unwrap();
        let link = files.iter().find(|(rel, _, _)| rel == "inside").unwrap();
        assert_eq!(
            (link.1, link.2.as_slice()),
            (LINK_MODE, b"Dockerfile".as_slice())
        );
        let tar = context_tar(&files, "FROM x\n", None).unwrap();
        let mut archive = tar::Archive::new(tar.as_slice());
        let kinds: Vec<(String, tar::EntryType)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.path().unwrap().display().to_string(),
                    e.header().entry_type(),
                )
            })
            .collect();
        assert!(
            kinds.contains(&("inside".to_owned(), tar::EntryType::Symlink)),
            "{kinds:?}"
        );
        std::os::unix::fs::symlink(dir.path().join("id_rsa"), context.join("leak")).unwrap();
        let err = format!("{}", context_files(&context).unwrap_err());
        assert!(
            err.contains("leak") && err.contains("outside the build context"),
            "{err}"
        );
        std::fs::remove_file(context.join("leak")).unwrap();
        std::os::unix::fs::symlink("/", context.join("root")).unwrap();
        assert!(
            context_files(&context).is_err(),
            "a link to / is not walked"
        );
    }

    #[test]
    fn from_lines_are_mapped_and_the_ca_added() {
        let settings = BuildSettings {
            image_map: vec![
                ("python:3.12-slim".to_owned(), "base:local".to_owned()),
                ("ghcr.io/org/".to_owned(), "mirror.local/org/".to_owned()),
            ],
            ca_bundle: Some(b"PEM".to_vec()),
        };
        let out = settings.rewrite("FROM python:3.12-slim AS build\nRUN pip install x\nfrom --platform=linux/amd64 ghcr.io/org/img:1\n");
        assert!(out.starts_with("FROM base:local AS build\nCOPY .harness-build-ca.crt /usr/local/share/ca-certificates/harness-build-ca.crt\nARG SSL_CERT_FILE="), "{out}");
        assert!(
            out.contains("from --platform=linux/amd64 mirror.local/org/img:1\n"),
            "{out}"
        );
        assert_eq!(settings.map_image("alpine"), "alpine");
        assert!(parse_mapping("nothing").is_err());
    }
}
