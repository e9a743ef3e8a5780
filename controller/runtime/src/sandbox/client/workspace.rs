//! The policy's view of a workspace, through the sandbox API like everything else: the
//! repository git would use from a folder (its `.git`, a bare repository, a `commondir` that
//! points elsewhere) and what a process started by id is and where it is.

use super::{SandboxClient, encode_segment};

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
    async fn bare_repository(&self, folder: &str) -> policy::GitDir {
        use policy::GitDir;
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

/// The policy's view of the workspace: its `.git`, through the API like everything else.
impl policy::Workspace for SandboxClient {
    fn process<'a>(
        &'a self,
        id: &'a str,
    ) -> futures::future::BoxFuture<'a, Option<policy::ProcessView>> {
        Box::pin(async move {
            let path = format!("/v1/processes/{}", encode_segment(id));
            let response = self
                .send(self.request(reqwest::Method::GET, &path))
                .await
                .ok()?;
            let process: sandbox_protocol::ManagedProcess = self.json(response).await.ok()?;
            Some(policy::ProcessView {
                cmd: process.cmd,
                cwd: process.cwd,
            })
        })
    }

    fn git_dir<'a>(&'a self, folder: &'a str) -> futures::future::BoxFuture<'a, policy::GitDir> {
        use policy::GitDir;
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
            match self.read_config(&format!("{git}/config"), MAX_CONFIG).await {
                Ok(config) => GitDir::Folder(config),
                Err(why) => GitDir::Unreadable(why),
            }
        })
    }
}
