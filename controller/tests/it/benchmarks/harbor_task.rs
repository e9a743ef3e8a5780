//! A Harbor task folder written by a test: `task.toml`, its instruction, its image's
//! Dockerfile, its tests and (when it has one) its solution.

use std::path::Path;

/// The limits of a quick task of the Docker tests, with no internet.
pub(crate) const QUICK: &str = "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n[environment]\nallow_internet = false\n";

/// A Harbor task's files; `solve` and `test` are the bodies of `solution/solve.sh` and
/// `tests/test.sh` (each written under `#!/bin/bash`).
pub(crate) struct HarborTask<'a> {
    pub(crate) toml: &'a str,
    pub(crate) instruction: &'a str,
    pub(crate) dockerfile: &'a str,
    pub(crate) solve: Option<&'a str>,
    pub(crate) test: &'a str,
}

/// A task that loads and never runs: its image is not one (no Docker needed).
pub(crate) const LOADS: HarborTask<'static> = HarborTask {
    toml: "version = \"1.0\"\n",
    instruction: "Do it.\n",
    dockerfile: "FROM x\n",
    solve: None,
    test: "true",
};

impl<'a> HarborTask<'a> {
    /// A [`QUICK`] task on the base image that asks for `ok` in `/app/out`, solved by `solve`
    /// and checked by `test`.
    pub(crate) fn quick(solve: &'a str, test: &'a str) -> Self {
        HarborTask {
            toml: QUICK,
            instruction: "Write ok to /app/out.\n",
            dockerfile: "FROM agent-harness/base:bookworm\nWORKDIR /app\n",
            solve: Some(solve),
            test,
        }
    }

    /// The task written as the folder `dir` (made, with its parents).
    pub(crate) fn write(&self, dir: &Path) {
        let solve = self.solve.map(|solve| format!("#!/bin/bash\n{solve}\n"));
        let test = format!("#!/bin/bash\n{}\n", self.test);
        let files = [
            ("task.toml", Some(self.toml)),
            ("instruction.md", Some(self.instruction)),
            ("environment/Dockerfile", Some(self.dockerfile)),
            ("solution/solve.sh", solve.as_deref()),
            ("tests/test.sh", Some(test.as_str())),
        ];
        for (path, text) in files {
            if let Some(text) = text {
                let path = dir.join(path);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, text).unwrap();
            }
        }
    }
}
