//! Containment of each command, applied between fork and exec: a clean environment, resource
//! limits, an unprivileged user, Landlock (writes only in the workspace and a private temporary
//! folder), and a seccomp filter that leaves only Unix sockets (`--network none`), plus a fresh
//! network namespace where the host permits one. Everything that allocates is prepared here in
//! the parent; the child only makes async-signal-safe system calls.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::libc;

/// Resource limits per command; 0 means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimits {
    pub cpu_secs: u64,
    pub memory_bytes: u64,
    pub file_size_bytes: u64,
    pub processes: u64,
    pub open_files: u64,
}

/// What the operator asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfineRequest {
    pub rlimits: Rlimits,
    pub landlock: bool,
    /// Extra paths commands may write beneath, besides the workspace and the private temp folder.
    pub writable: Vec<PathBuf>,
    /// Paths whose files commands may not read (names stay listable); the token file by default.
    pub hidden: Vec<PathBuf>,
    pub network_none: bool,
    pub run_as: Option<(u32, u32)>,
    /// Extra environment variables passed through, besides the base allow-list.
    pub env_allow: Vec<String>,
}

/// One protection and whether it is in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protection {
    pub name: &'static str,
    pub active: bool,
    pub detail: String,
}

/// The prepared containment, shared by every spawn.
#[derive(Debug)]
pub struct Confinement {
    pub env: Vec<(String, String)>,
    rlimits: Rlimits,
    landlock_fd: Option<OwnedFd>,
    seccomp: Option<Vec<libc::sock_filter>>,
    netns: bool,
    run_as: Option<(u32, u32)>,
    /// Per-command cgroups, where this process may create them.
    pub cgroups: Option<super::cgroups::Cgroups>,
    pub protections: Vec<Protection>,
}

/// Variables a command may see from the server's environment.
const BASE_ENV: &[&str] = &[
    "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER", "LOGNAME", "SHELL",
];

impl Confinement {
    /// Probes and prepares each requested protection; what cannot be applied is reported, never faked.
    pub fn prepare(request: &ConfineRequest, workspace: &Path, private_tmp: &Path) -> Confinement {
        let mut protections = vec![Protection {
            name: "process_group",
            active: true,
            detail: "each command runs in its own session; timeouts kill the whole tree".to_owned(),
        }];

        let mut env: Vec<(String, String)> = BASE_ENV
            .iter()
            .map(|name| (*name).to_owned())
            .chain(request.env_allow.iter().cloned())
            .filter_map(|name| std::env::var(&name).ok().map(|value| (name, value)))
            .collect();
        env.push(("TMPDIR".to_owned(), private_tmp.display().to_string()));
        protections.push(Protection {
            name: "clean_environment",
            active: true,
            detail: format!(
                "commands see only {} and TMPDIR",
                BASE_ENV
                    .iter()
                    .copied()
                    .chain(request.env_allow.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });

        let limits = request.rlimits;
        protections.push(Protection {
            name: "resource_limits",
            active: true,
            detail: format!(
                "cpu {} s, memory {}, file size {}, processes {}, open files {}",
                show(limits.cpu_secs),
                show_bytes(limits.memory_bytes),
                show_bytes(limits.file_size_bytes),
                show(limits.processes),
                show(limits.open_files)
            ),
        });

        let is_root = nix::unistd::geteuid().is_root();
        let run_as = request.run_as.filter(|_| is_root);
        protections.push(match (request.run_as, is_root) {
            (Some((uid, gid)), true) => Protection { name: "unprivileged_user", active: true, detail: format!("commands run as uid {uid}, gid {gid}") },
            (Some(_), false) => Protection { name: "unprivileged_user", active: true, detail: "the server is not root; commands run as its own user".to_owned() },
            (None, true) => Protection {
                name: "unprivileged_user",
                active: false,
                detail: "the server runs as root and --run-as is not set: commands run as root (and the process limit does not bind root)".to_owned(),
            },
            (None, false) => Protection { name: "unprivileged_user", active: true, detail: "commands run as the server's own, unprivileged user".to_owned() },
        });

        let mut landlock_fd = None;
        if request.landlock {
            let mut writable = vec![workspace.to_owned(), private_tmp.to_owned()];
            writable.extend(request.writable.iter().cloned());
            let hidden: Vec<PathBuf> = request
                .hidden
                .iter()
                .filter_map(|p| p.canonicalize().ok())
                .collect();
            match landlock_ruleset(&writable, &hidden) {
                Ok((fd, abi)) => {
                    landlock_fd = Some(fd);
                    let paths: Vec<String> =
                        writable.iter().map(|p| p.display().to_string()).collect();
                    let reading = if hidden.is_empty() {
                        "reading stays allowed".to_owned()
                    } else {
                        let names: Vec<String> =
                            hidden.iter().map(|p| p.display().to_string()).collect();
                        format!(
                            "reading stays allowed except the files of {}",
                            names.join(", ")
                        )
                    };
                    protections.push(Protection {
                        name: "landlock",
                        active: true,
                        detail: format!(
                            "ABI {abi}: writes only beneath {} and /dev; {reading}",
                            paths.join(", ")
                        ),
                    });
                }
                Err(why) => protections.push(Protection {
                    name: "landlock",
                    active: false,
                    detail: why,
                }),
            }
        } else {
            protections.push(Protection {
                name: "landlock",
                active: false,
                detail: "turned off (--landlock false)".to_owned(),
            });
        }

        let (seccomp, netns) = if request.network_none {
            let filter = seccomp_filter();
            let netns = probe_netns();
            protections.push(Protection {
                name: "network_none",
                active: filter.is_some(),
                detail: match &filter {
                    Some(_) => {
                        "seccomp refuses every socket but Unix sockets (and io_uring)".to_owned()
                    }
                    None => "seccomp filters are not supported on this architecture".to_owned(),
                },
            });
            protections.push(Protection {
                name: "network_namespace",
                active: netns,
                detail: if netns {
                    "each command also gets a fresh network namespace with no interfaces".to_owned()
                } else {
                    "the host does not allow a new network namespace (seccomp still applies)"
                        .to_owned()
                },
            });
            (filter, netns)
        } else {
            protections.push(Protection {
                name: "network_none",
                active: false,
                detail: "--network host: commands may use the network".to_owned(),
            });
            (None, false)
        };

        let cgroups = match super::cgroups::Cgroups::probe() {
            Ok(cgroups) => {
                protections.push(Protection {
                    name: "cgroup",
                    active: true,
                    detail: format!(
                        "each command gets its own group ({}): processes {}, memory {} for its whole tree, root included",
                        cgroups.describe(),
                        show(limits.processes),
                        show_bytes(limits.memory_bytes)
                    ),
                });
                Some(cgroups)
            }
            Err(why) => {
                protections.push(Protection {
                    name: "cgroup",
                    active: false,
                    detail: why,
                });
                None
            }
        };
        Confinement {
            env,
            rlimits: request.rlimits,
            landlock_fd,
            seccomp,
            netns,
            run_as,
            cgroups,
            protections,
        }
    }

    pub fn rlimits(&self) -> Rlimits {
        self.rlimits
    }

    /// Names of the protections that could not be applied although asked for.
    pub fn missing(&self) -> Vec<&Protection> {
        self.protections.iter().filter(|p| !p.active).collect()
    }

    /// The closure to run in the child between fork and exec. It must only make
    /// async-signal-safe calls: everything it touches was prepared in `prepare`.
    pub fn child_setup(
        &self,
        join: Vec<RawFd>,
    ) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
        let rlimits = self.rlimits;
        let landlock = self.landlock_fd.as_ref().map(AsRawFd::as_raw_fd);
        let seccomp: Option<(usize, usize)> = self
            .seccomp
            .as_ref()
            .map(|prog| (prog.as_ptr() as usize, prog.len()));
        let netns = self.netns;
        let run_as = self.run_as;
        move || {
            // SAFETY (whole closure): each call below is a raw system call on values prepared
            // before fork; none allocates or takes a lock. The seccomp program pointer stays
            // valid because the `Confinement` that owns it lives as long as the server.
            // Join the call's cgroups first, while still privileged: write our pid, formatted
            // on the stack.
            if !join.is_empty() {
                let mut digits = [0u8; 12];
                let mut at = digits.len();
                let mut pid = unsafe { libc::getpid() } as u32;
                loop {
                    at -= 1;
                    digits[at] = b'0' + (pid % 10) as u8;
                    pid /= 10;
                    if pid == 0 {
                        break;
                    }
                }
                for &fd in &join {
                    let written =
                        unsafe { libc::write(fd, digits[at..].as_ptr().cast(), digits.len() - at) };
                    if written < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
            }
            if netns {
                check(unsafe { libc::unshare(libc::CLONE_NEWNET) })?;
            }
            let set = |resource, value: u64| {
                if value == 0 {
                    return Ok(());
                }
                let limit = libc::rlimit {
                    rlim_cur: value,
                    rlim_max: value,
                };
                check(unsafe { libc::setrlimit(resource, &limit) })
            };
            set(libc::RLIMIT_CPU, rlimits.cpu_secs)?;
            set(libc::RLIMIT_AS, rlimits.memory_bytes)?;
            set(libc::RLIMIT_FSIZE, rlimits.file_size_bytes)?;
            set(libc::RLIMIT_NPROC, rlimits.processes)?;
            set(libc::RLIMIT_NOFILE, rlimits.open_files)?;
            if let Some((uid, gid)) = run_as {
                check(unsafe { libc::setgroups(0, std::ptr::null()) })?;
                check(unsafe { libc::setgid(gid) })?;
                check(unsafe { libc::setuid(uid) })?;
            }
            if landlock.is_some() || seccomp.is_some() {
                check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
            }
            if let Some(fd) = landlock {
                check(unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0) } as i32)?;
            }
            if let Some((ptr, len)) = seccomp {
                let program = libc::sock_fprog {
                    len: len as u16,
                    filter: ptr as *mut libc::sock_filter,
                };
                check(unsafe {
                    libc::prctl(
                        libc::PR_SET_SECCOMP,
                        libc::SECCOMP_MODE_FILTER,
                        &program as *const libc::sock_fprog,
                    )
                })?;
            }
            Ok(())
        }
    }
}

fn check(result: i32) -> std::io::Result<()> {
    if result < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn show(value: u64) -> String {
    if value == 0 {
        "unlimited".to_owned()
    } else {
        value.to_string()
    }
}

fn show_bytes(value: u64) -> String {
    match value {
        0 => "unlimited".to_owned(),
        v if v % (1 << 30) == 0 => format!("{} GiB", v >> 30),
        v if v % (1 << 20) == 0 => format!("{} MiB", v >> 20),
        v => format!("{v} bytes"),
    }
}

// Landlock ABI constants (include/uapi/linux/landlock.h).
const ACCESS_FS_WRITE_FILE: u64 = 1 << 1;
const ACCESS_FS_REMOVE_DIR: u64 = 1 << 4;
const ACCESS_FS_REMOVE_FILE: u64 = 1 << 5;
const ACCESS_FS_MAKE_CHAR: u64 = 1 << 6;
const ACCESS_FS_MAKE_DIR: u64 = 1 << 7;
const ACCESS_FS_MAKE_REG: u64 = 1 << 8;
const ACCESS_FS_MAKE_SOCK: u64 = 1 << 9;
const ACCESS_FS_MAKE_FIFO: u64 = 1 << 10;
const ACCESS_FS_MAKE_BLOCK: u64 = 1 << 11;
const ACCESS_FS_MAKE_SYM: u64 = 1 << 12;
const ACCESS_FS_REFER: u64 = 1 << 13;
const ACCESS_FS_TRUNCATE: u64 = 1 << 14;
const RULE_PATH_BENEATH: libc::c_int = 1;
const CREATE_RULESET_VERSION: u32 = 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

const ACCESS_FS_READ_FILE: u64 = 1 << 2;

/// The roots beneath which reading files stays allowed when `hidden` paths must not be read:
/// starting from `/`, each ancestor of a hidden path is replaced by its other entries. (Entries
/// created later inside such an ancestor are not readable; the hidden paths themselves never.)
fn readable_roots(hidden: &[PathBuf]) -> Vec<PathBuf> {
    let mut roots = vec![PathBuf::from("/")];
    for target in hidden {
        let mut next = Vec::new();
        for root in roots {
            if target == &root {
                continue;
            }
            if !target.starts_with(&root) {
                next.push(root);
                continue;
            }
            // Punch out: walk from `root` down to `target`, keeping every sibling on the way.
            let mut dir = root;
            for component in target.strip_prefix(&dir).expect("an ancestor").components() {
                let child = dir.join(component);
                if let Ok(entries) = std::fs::read_dir(&dir) {
                    for entry in entries.flatten() {
                        if entry.path() != child {
                            next.push(entry.path());
                        }
                    }
                }
                dir = child;
            }
        }
        roots = next;
    }
    roots
}

/// A ruleset that handles every kind of write, granting them beneath `writable` (and file
/// writes beneath `/dev`, for `/dev/null` and the terminal). Executing is not handled, so it
/// stays allowed; reading files is handled only when some paths are `hidden`, and then granted
/// everywhere but there.
fn landlock_ruleset(writable: &[PathBuf], hidden: &[PathBuf]) -> Result<(OwnedFd, i64), String> {
    // SAFETY: the version query passes no pointer.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if abi < 1 {
        return Err(format!(
            "Landlock is not available in this kernel ({})",
            std::io::Error::last_os_error()
        ));
    }
    let mut writes = ACCESS_FS_WRITE_FILE
        | ACCESS_FS_REMOVE_DIR
        | ACCESS_FS_REMOVE_FILE
        | ACCESS_FS_MAKE_CHAR
        | ACCESS_FS_MAKE_DIR
        | ACCESS_FS_MAKE_REG
        | ACCESS_FS_MAKE_SOCK
        | ACCESS_FS_MAKE_FIFO
        | ACCESS_FS_MAKE_BLOCK
        | ACCESS_FS_MAKE_SYM;
    if abi >= 2 {
        writes |= ACCESS_FS_REFER;
    }
    if abi >= 3 {
        writes |= ACCESS_FS_TRUNCATE;
    }
    let reads = if hidden.is_empty() {
        0
    } else {
        ACCESS_FS_READ_FILE
    };
    let attr = RulesetAttr {
        handled_access_fs: writes | reads,
    };
    // SAFETY: `attr` is a valid ruleset attribute of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if fd < 0 {
        return Err(format!(
            "creating a Landlock ruleset failed ({})",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: the kernel just returned this descriptor to us.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let dev_writes = ACCESS_FS_WRITE_FILE | if abi >= 3 { ACCESS_FS_TRUNCATE } else { 0 };
    let mut grants: Vec<(PathBuf, u64)> = writable.iter().map(|p| (p.clone(), writes)).collect();
    grants.push((PathBuf::from("/dev"), dev_writes));
    if reads != 0 {
        grants.extend(readable_roots(hidden).into_iter().map(|root| (root, reads)));
    }
    for (path, access) in grants {
        let c_path = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| format!("{}: a NUL in the path", path.display()))?;
        // SAFETY: a valid, NUL-terminated path.
        let parent = unsafe { libc::open(c_path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
        if parent < 0 {
            return Err(format!(
                "opening {} for Landlock: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: just opened.
        let parent = unsafe { OwnedFd::from_raw_fd(parent) };
        // A directory may hold every write right; a file only the file ones.
        let is_dir = path.is_dir();
        let allowed = if is_dir {
            access
        } else {
            access & (ACCESS_FS_WRITE_FILE | ACCESS_FS_TRUNCATE | ACCESS_FS_READ_FILE)
        };
        if allowed == 0 {
            continue;
        }
        let rule = PathBeneathAttr {
            allowed_access: allowed,
            parent_fd: parent.as_raw_fd(),
        };
        // SAFETY: a valid rule for a path-beneath rule type.
        let added = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                RULE_PATH_BENEATH,
                &rule as *const PathBeneathAttr,
                0u32,
            )
        };
        if added < 0 {
            return Err(format!(
                "adding a Landlock rule for {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok((ruleset, abi))
}

/// The seccomp program for `--network none`: sockets other than `AF_UNIX`, and io_uring (which
/// can open sockets without the `socket` call), fail with EACCES; foreign system-call ABIs fail.
fn seccomp_filter() -> Option<Vec<libc::sock_filter>> {
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const RET_ALLOW: u32 = 0x7fff_0000;
    let ret_errno: u32 = 0x0005_0000 | libc::EACCES as u32;
    #[cfg(target_arch = "x86_64")]
    let arch: u32 = 0xC000_003E;
    #[cfg(target_arch = "aarch64")]
    let arch: u32 = 0xC000_00B7;
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return None;
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let mut program = vec![
        op(LD_W_ABS, 0, 0, 4), // arch
        op(JEQ_K, 1, 0, arch),
        op(RET_K, 0, 0, ret_errno),
        op(LD_W_ABS, 0, 0, 0), // syscall number
    ];
    if cfg!(target_arch = "x86_64") {
        // x32 system calls carry bit 30; refuse them rather than mirror the whole table.
        program.push(op(JGE_K, 0, 1, 0x4000_0000));
        program.push(op(RET_K, 0, 0, ret_errno));
    }
    program.extend([
        op(JEQ_K, 0, 1, libc::SYS_io_uring_setup as u32),
        op(RET_K, 0, 0, ret_errno),
        op(JEQ_K, 1, 0, libc::SYS_socket as u32),
        op(RET_K, 0, 0, RET_ALLOW),
        op(LD_W_ABS, 0, 0, 16), // args[0], the domain (low 32 bits)
        op(JEQ_K, 0, 1, libc::AF_UNIX as u32),
        op(RET_K, 0, 0, RET_ALLOW),
        op(RET_K, 0, 0, ret_errno),
    ]);
    Some(program)
}

/// Whether a new network namespace can be made here: tried in a throwaway child.
fn probe_netns() -> bool {
    // SAFETY: the child only calls unshare and _exit.
    match unsafe { libc::fork() } {
        0 => {
            let status = if unsafe { libc::unshare(libc::CLONE_NEWNET) } == 0 {
                0
            } else {
                1
            };
            unsafe { libc::_exit(status) }
        }
        pid if pid > 0 => {
            let mut status = 0;
            // SAFETY: waiting for the child just forked (before the reaper starts).
            unsafe { libc::waitpid(pid, &mut status, 0) };
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
        }
        _ => false,
    }
}
