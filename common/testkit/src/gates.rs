//! The one list of what a test may need that a plain machine lacks: a variable each, which
//! `.ci/run` sets once it has set the need up. Both programs' build scripts read it: a
//! variable that is set turns on its cfg, and a test that needs it is
//! `#[cfg_attr(not(<cfg>), ignore = "needs <VAR>=…")]`, so without it the test is counted as
//! ignored, with its reason, never as a pass. Besides, the build probes the machine: root
//! (`harness_root`) and Landlock (`harness_landlock`).

/// A variable that tests need set, and what setting it says is there.
pub struct Gate {
    /// The variable: `HARNESS_TEST_…`.
    pub var: &'static str,
    /// The cfg the build sets when the variable is set: `harness_` and the rest of its name.
    pub cfg: &'static str,
    /// Whether it holds a program's path (read with [`value`]) rather than `1`.
    pub path: bool,
    /// What it says is there.
    pub needs: &'static str,
    /// The packages whose tests need it.
    pub packages: &'static [&'static str],
}

const CONTROLLER: &[&str] = &["controller"];
const SERVER: &[&str] = &["sandbox-server"];
const BOTH: &[&str] = &["controller", "sandbox-server"];

/// Every variable a test needs set (`.ci/run` exports each; README.md lists them).
pub const GATES: &[Gate] = &[
    Gate {
        var: "HARNESS_TEST_DOCKER",
        cfg: "harness_docker",
        path: false,
        needs: "a Docker engine, the sandbox and base images, a static sandbox-server",
        packages: CONTROLLER,
    },
    Gate {
        var: "HARNESS_TEST_DEPLOY",
        cfg: "harness_deploy",
        path: false,
        needs: "kubectl and kubernetes-validate",
        packages: CONTROLLER,
    },
    Gate {
        var: "HARNESS_TEST_BROWSER",
        cfg: "harness_browser",
        path: false,
        needs: "Chromium",
        packages: BOTH,
    },
    Gate {
        var: "HARNESS_TEST_PLAYWRIGHT_PYTHON",
        cfg: "harness_playwright_python",
        path: true,
        needs: "a Python with Playwright (the viewer in Chromium)",
        packages: CONTROLLER,
    },
    Gate {
        var: "HARNESS_TEST_SCHEMATHESIS",
        cfg: "harness_schemathesis",
        path: true,
        needs: "schemathesis's `st`, pinned",
        packages: SERVER,
    },
    Gate {
        var: "HARNESS_TEST_OPENAPI_CLIENT",
        cfg: "harness_openapi_client",
        path: true,
        needs: "openapi-python-client, pinned",
        packages: SERVER,
    },
    Gate {
        var: "HARNESS_TEST_HARBOR_PYTHON",
        cfg: "harness_harbor_python",
        path: true,
        needs: "a Python >= 3.12 with Harbor, whose models read the result files",
        packages: CONTROLLER,
    },
    Gate {
        var: "HARNESS_TEST_MCP_PYTHON",
        cfg: "harness_mcp_python",
        path: true,
        needs: "a Python with the official `mcp` SDK",
        packages: BOTH,
    },
    Gate {
        var: "HARNESS_TEST_OTLP_PYTHON",
        cfg: "harness_otlp_python",
        path: true,
        needs: "a Python with opentelemetry-proto, an OTLP receiver",
        packages: CONTROLLER,
    },
    Gate {
        var: "HARNESS_TEST_PROMETHEUS",
        cfg: "harness_prometheus",
        path: false,
        needs: "prometheus and promtool",
        packages: BOTH,
    },
    Gate {
        var: "HARNESS_TEST_PYTHON_SDK",
        cfg: "harness_python_sdk",
        path: true,
        needs: "a Python with the SDK of clients/python and pytest",
        packages: SERVER,
    },
];

/// The cfgs the build probes the machine for, with the word an ignored test's reason names.
pub const MACHINE: &[(&str, &str)] = &[("harness_root", "root"), ("harness_landlock", "Landlock")];

/// Whether a variable's value turns its gate on: anything but nothing and `0`.
pub fn is_set(value: &str) -> bool {
    !value.is_empty() && value != "0"
}

/// What a gate's variable holds, for a test that runs only when it is set (the program's path,
/// for most); the test fails, naming the variable, when it is not set after all.
pub fn value(var: &str) -> String {
    assert!(
        GATES.iter().any(|gate| gate.var == var),
        "{var} is not in testkit::gates::GATES"
    );
    std::env::var(var)
        .ok()
        .filter(|value| is_set(value))
        .unwrap_or_else(|| panic!("{var} is not set though the build saw it: rebuild"))
}

/// What a package's build script prints, one `cargo::` instruction a line: for each gate of
/// the package, its cfg declared, its variable watched, and the cfg set when the variable is
/// (else a warning naming what is ignored); then the machine's cfgs, declared and probed.
pub fn instructions(package: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for gate in GATES.iter().filter(|gate| gate.packages.contains(&package)) {
        lines.push(format!("cargo::rustc-check-cfg=cfg({})", gate.cfg));
        lines.push(format!("cargo::rerun-if-env-changed={}", gate.var));
        if std::env::var(gate.var).is_ok_and(|value| is_set(&value)) {
            lines.push(format!("cargo::rustc-cfg={}", gate.cfg));
        } else {
            lines.push(format!(
                "cargo::warning={} is not set: the tests that need {} are ignored (bash .ci/run sets it up)",
                gate.var, gate.needs
            ));
        }
    }
    for (cfg, present) in [("harness_root", root()), ("harness_landlock", landlock())] {
        lines.push(format!("cargo::rustc-check-cfg=cfg({cfg})"));
        if present {
            lines.push(format!("cargo::rustc-cfg={cfg}"));
        }
    }
    lines
}

/// Whether this process runs as root: the effective uid, the second field of `Uid:` in
/// `/proc/self/status`.
fn root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1));
    effective == Some("0")
}

/// Whether the kernel runs Landlock (`/sys/kernel/security/lsm` names it).
fn landlock() -> bool {
    std::fs::read_to_string("/sys/kernel/security/lsm")
        .is_ok_and(|lsm| lsm.split(',').any(|name| name.trim() == "landlock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cfg_is_its_variables_name_and_each_gate_serves_a_program() {
        for gate in GATES {
            let rest = gate.var.strip_prefix("HARNESS_TEST_").unwrap();
            assert_eq!(gate.cfg, format!("harness_{}", rest.to_lowercase()));
            assert!(!gate.packages.is_empty(), "{}", gate.var);
        }
        let lines = instructions("sandbox-server");
        assert!(lines.contains(&"cargo::rustc-check-cfg=cfg(harness_root)".to_owned()));
        assert!(
            !lines
                .iter()
                .any(|line| line.contains("HARNESS_TEST_DOCKER"))
        );
    }
}
