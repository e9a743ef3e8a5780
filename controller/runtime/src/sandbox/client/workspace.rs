//! The policy's view of a workspace, through the sandbox API like everything else: the
//! repository git would use from a folder (its `.git`, a bare repository, a `commondir` that
//! points elsewhere) and what a process started by id is and where it is.

use super::{SandboxClient, encode_path, encode_segment};

/// A repository config larger than this is not read (and not trusted).
const MAX_CONFIG: usize = 1 << 20;

impl SandboxClient {
    /// A config file's text: empty when there is none, an error when it is over `cap` or
    /// cannot be read.
    async fn read_config(&self, path: &str, cap: usize) -> Result<String, String> {
        match self.get_file(path, cap).await {
            Ok(Some(head)) if head.truncated() => Err(format!(
                "{path} is {} bytes, over the {cap} this harness reads",
                head.size
            )),
            Ok(Some(head)) => Ok(String::from_utf8_lossy(&head.bytes).into_owned()),
            Ok(None) => Ok(String::new()),
            Err(err) => Err(err.to_string()),
        }
    }

    /// `folder` itself as a repository, as git finds one when it has no `.git`: a `HEAD` file
    /// beside an `objects/` or `refs/` folder (or a `config`) is a bare repository.
    async fn bare_repository(&self, folder: &str) -> harness_policy::GitDir {
        use harness_policy::GitDir;
        let inside = |name: &str| {
            if folder == "." {
                name.to_owned()
            } else {
                format!("{folder}/{name}")
            }
        };
        let head = matches!(self.get_file(&inside("HEAD"), 0).await, Ok(Some(_)));
        if !head {
            return GitDir::Missing;
        }
        let folder_named = |name: &'static str| {
            let path = inside(name);
            async move { matches!(self.list_dir(&path).await, Ok(Some(_))) }
        };
        let config = self.read_config(&inside("config"), MAX_CONFIG).await;
        let shaped = folder_named("objects").await || folder_named("refs").await;
        if !shaped && matches!(&config, Ok(text) if text.is_empty()) {
            return GitDir::Missing;
        }
        if let Ok(Some(_)) = self.get_file(&inside("commondir"), 0).await {
            return GitDir::Redirected(inside("commondir"));
        }
        match config {
            Ok(text) => GitDir::Bare(text),
            Err(why) => GitDir::Unreadable(why),
        }
    }
}

/// The most configs of submodules and worktrees read for one repository; past it, the
/// repository is for a person (`Err`).
const MAX_MORE_CONFIGS: usize = 64;
/// How deep submodules are followed (`modules/a/modules/b/…`).
const MAX_SUBMODULE_DEPTH: usize = 4;

impl SandboxClient {
    /// The configs git reads besides `GIT/config`: `config.worktree`, each worktree's
    /// `config.worktree`, and each submodule's `config` under `modules/` (names may hold `/`,
    /// and submodules nest), as `(path below GIT, text)`.
    async fn more_configs(&self, git: &str) -> Result<Vec<(String, String)>, String> {
        let mut found = Vec::new();
        let mut read = |path: String, text: String| {
            found.push((path, text));
            if found.len() > MAX_MORE_CONFIGS {
                return Err(format!(
                    "{git} holds more than {MAX_MORE_CONFIGS} submodule and worktree configs"
                ));
            }
            Ok(())
        };
        let text = self
            .read_config(&format!("{git}/config.worktree"), MAX_CONFIG)
            .await?;
        if !text.is_empty() {
            read("config.worktree".to_owned(), text)?;
        }
        for worktree in self.folders(&format!("{git}/worktrees")).await? {
            let path = format!("worktrees/{worktree}/config.worktree");
            let text = self
                .read_config(&format!("{git}/{path}"), MAX_CONFIG)
                .await?;
            if !text.is_empty() {
                read(path, text)?;
            }
        }
        // Breadth first over `modules/`: a folder with a `config` is a submodule's git folder
        // (whose own `modules/` holds its submodules); one without is part of a name with `/`.
        let mut queue = vec![("modules".to_owned(), 0usize)];
        while let Some((folder, depth)) = queue.pop() {
            if depth > MAX_SUBMODULE_DEPTH * 4 {
                return Err(format!("{git}/{folder} nests too deep to read"));
            }
            for name in self.folders(&format!("{git}/{folder}")).await? {
                let inner = format!("{folder}/{name}");
                let text = self
                    .read_config(&format!("{git}/{inner}/config"), MAX_CONFIG)
                    .await?;
                if text.is_empty() {
                    queue.push((inner, depth + 1));
                } else {
                    read(format!("{inner}/config"), text)?;
                    queue.push((format!("{inner}/modules"), depth + 1));
                }
            }
        }
        Ok(found)
    }

    /// The names of the folders in `path`, none when it is no folder; a symlink there (git
    /// would follow it, the listing does not) is for a person.
    async fn folders(&self, path: &str) -> Result<Vec<String>, String> {
        use sandbox_protocol::EntryKind;
        let listing = match self.list_dir(path).await {
            Ok(Some(listing)) => listing,
            Ok(None) => return Ok(Vec::new()),
            Err(err) => return Err(format!("{path}: {err}")),
        };
        if let Some(link) = listing
            .entries
            .iter()
            .find(|e| e.kind == EntryKind::Symlink)
        {
            return Err(format!("{path}/{} is a symlink", link.name));
        }
        Ok(listing
            .entries
            .into_iter()
            .filter(|entry| entry.kind == EntryKind::Dir)
            .map(|entry| entry.name)
            .collect())
    }
}

/// The policy's view of the workspace: its `.git`, through the API like everything else.
impl harness_policy::Workspace for SandboxClient {
    fn process<'a>(
        &'a self,
        id: &'a str,
    ) -> futures::future::BoxFuture<'a, Option<harness_policy::ProcessView>> {
        Box::pin(async move {
            let path = format!("/v1/processes/{}", encode_segment(id));
            let response = self
                .send(self.request(reqwest::Method::GET, &path))
                .await
                .ok()?;
            let process: sandbox_protocol::ManagedProcess = self.json(response).await.ok()?;
            Some(harness_policy::ProcessView {
                cmd: process.cmd,
                cwd: process.cwd,
            })
        })
    }

    fn leads_out<'a>(&'a self, path: &'a str) -> futures::future::BoxFuture<'a, Option<String>> {
        Box::pin(async move {
            let route = format!("/v1/paths/{}", encode_path(path));
            // An older sandbox without the route says nothing: the sandbox's own view of the
            // files is what keeps a command from reading through such a link then.
            let response = self
                .send(self.request(reqwest::Method::GET, &route))
                .await
                .ok()?;
            let info: sandbox_protocol::PathInfo = self.json(response).await.ok()?;
            info.leads_to
        })
    }

    fn git_dir<'a>(
        &'a self,
        folder: &'a str,
    ) -> futures::future::BoxFuture<'a, harness_policy::GitDir> {
        use harness_policy::GitDir;
        Box::pin(async move {
            let git = if folder == "." {
                ".git".to_owned()
            } else {
                format!("{folder}/.git")
            };
            match self.list_dir(&git).await {
                Ok(Some(_)) => {}
                Ok(None) => return self.bare_repository(folder).await,
                Err(_) => {
                    return match self.get_file(&git, 0).await {
                        Ok(Some(_)) => GitDir::File,
                        Ok(None) => GitDir::Missing,
                        Err(err) => GitDir::Unreadable(err.to_string()),
                    };
                }
            }
            if let Ok(Some(_)) = self.get_file(&format!("{git}/commondir"), 0).await {
                return GitDir::Redirected(format!("{git}/commondir"));
            }
            let config = match self.read_config(&format!("{git}/config"), MAX_CONFIG).await {
                Ok(config) => config,
                Err(why) => return GitDir::Unreadable(why),
            };
            match self.more_configs(&git).await {
                Ok(more) => GitDir::Folder { config, more },
                Err(why) => GitDir::Unreadable(why),
            }
        })
    }
}
