//! Copies of a rerun's local sandbox for the forked subagents of the log it reruns: a server
//! over a temporary folder with the same tools, the workspace streamed in.

use futures::future::BoxFuture;
use harness_replay::rerun::{ForkedSandbox, Forker};
use harness_runtime::sandbox::SandboxClient;
use harness_runtime::sandbox::local::{LocalOptions, LocalSandbox};

/// Starts each copy as the rerun's own local sandbox was started.
pub(super) struct LocalForker {
    pub(super) tools: Vec<String>,
}

struct LocalCopy {
    local: LocalSandbox,
    _dir: tempfile::TempDir,
}

impl ForkedSandbox for LocalCopy {
    fn client(&self) -> &SandboxClient {
        &self.local.client
    }

    fn stop(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let LocalCopy { local, _dir } = *self;
            local.stop().await;
        })
    }
}

impl Forker for LocalForker {
    fn fork<'a>(
        &'a self,
        from: &'a SandboxClient,
    ) -> BoxFuture<'a, Result<Box<dyn ForkedSandbox>, String>> {
        Box::pin(async move {
            let dir = tempfile::Builder::new()
                .prefix("harness-rerun-fork-")
                .tempdir()
                .map_err(|err| format!("a folder for the copy: {err}"))?;
            let token = format!("{:032x}", rand::random::<u128>());
            let options = LocalOptions {
                tools: (!self.tools.is_empty()).then_some(self.tools.as_slice()),
                ..LocalOptions::plain()
            };
            let local = LocalSandbox::start(dir.path(), &token, options)
                .await
                .map_err(|err| format!("starting the copy: {err}"))?;
            if let Err(err) = from.copy_workspace_to(&local.client).await {
                local.stop().await;
                return Err(format!("copying the workspace: {err}"));
            }
            Ok(Box::new(LocalCopy { local, _dir: dir }) as Box<dyn ForkedSandbox>)
        })
    }
}
