//! `sandbox-server pid-init`: PID 1 of the commands' namespaces.
//!
//! It runs as a fresh, single-threaded program (the server clones it into the new namespaces
//! and it executes this binary), so it may allocate and call anything. In order: die with the
//! server, become undumpable, keep the host's mounts from leaking either way, map the server's
//! files under the given paths to the commands' user, mount a `/proc` of this PID namespace
//! with the kernel's memory and debug files masked, mount a `/dev` with only the nodes programs
//! need, say `ready`, and reap orphans until it is killed. The first line on standard output is
//! the server's answer: `ready`, or what failed.

#![allow(unsafe_code)] // mount API system calls without a wrapper, prctl, sigtimedwait

use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::libc;

/// The line that says the namespaces are ready.
pub const READY: &str = "ready";
/// How a failure to map a path starts (the server then refuses to start).
pub const MAPPING_ERROR: &str = "mapping";

/// What the server asked for.
#[derive(Debug, Clone, Default)]
pub struct InitSpec {
    /// The commands' user: the server's files (uid and gid 0) under `map` become this user's.
    pub run_as: Option<(u32, u32)>,
    pub map: Vec<PathBuf>,
}

/// The device nodes commands may open, bound from the host's `/dev`.
pub const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty", "ptmx"];

/// Files of `/proc` that show kernel memory, keys or debug state: each is replaced by an
/// empty device (`/dev/null`) for commands.
const PROC_MASKED_FILES: &[&str] = &[
    "kcore",
    "kmsg",
    "keys",
    "kallsyms",
    "kpagecount",
    "kpageflags",
    "kpagecgroup",
    "timer_list",
    "sched_debug",
    "latency_stats",
    "sysrq-trigger",
    "vmallocinfo",
];
/// Folders of `/proc` and `/sys` hidden behind an empty read-only tmpfs.
const MASKED_DIRS: &[&str] = &["/proc/acpi", "/proc/scsi", "/proc/asound", "/sys/firmware"];
/// Folders of `/proc` made read-only (Landlock already refuses writes; this holds without it).
const PROC_READ_ONLY: &[&str] = &["sys", "irq", "bus", "fs"];

/// Runs the init; returns only when the setup failed (the exit code).
pub fn run(spec: &InitSpec) -> i32 {
    let mut stdout = std::io::stdout().lock();
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    if let Err(why) = set_up(spec) {
        let _ = writeln!(stdout, "{why}");
        return 1;
    }
    // A server that died before the death signal was set: the write fails (EPIPE, SIGPIPE is
    // ignored by Rust's runtime) and the init ends.
    if writeln!(stdout, "{READY}")
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return 1;
    }
    drop(stdout);
    reap_forever()
}

fn set_up(spec: &InitSpec) -> Result<(), String> {
    mount(None, "/", None, libc::MS_REC | libc::MS_SLAVE, None)
        .map_err(|err| format!("making the mounts private: {err}"))?;
    // The host's device nodes, reached before a new /dev hides them.
    let devices: Vec<(&str, OwnedFd)> = DEVICES
        .iter()
        .filter_map(|name| {
            open_path(&Path::new("/dev").join(name))
                .ok()
                .map(|fd| (*name, fd))
        })
        .collect();
    let pts = open_path(Path::new("/dev/pts")).ok();
    // First: the mapping child's pid below is this namespace's, which only this /proc knows.
    mount_proc().map_err(|err| format!("mounting /proc: {err}"))?;
    if let Some((uid, gid)) = spec.run_as {
        let userns = mapping_namespace(uid, gid)
            .map_err(|err| format!("{MAPPING_ERROR}: making the uid map for {uid}:{gid}: {err}"))?;
        for path in &spec.map {
            map_path(path, &userns).map_err(|err| {
                format!(
                    "{MAPPING_ERROR} {}: the server's files there cannot be made uid {uid}'s (an idmapped mount: {err}); run commands as the workspace's owner (--run-as), or put the workspace on a file system that supports idmapped mounts",
                    path.display()
                )
            })?;
        }
    }
    mount_dev(&devices, pts.as_ref()).map_err(|err| format!("mounting /dev: {err}"))?;
    for dir in MASKED_DIRS {
        if Path::new(dir).is_dir() {
            mount(
                Some("tmpfs"),
                dir,
                Some("tmpfs"),
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                Some("size=0"),
            )
            .map_err(|err| format!("masking {dir}: {err}"))?;
        }
    }
    Ok(())
}

/// A `/proc` of this PID namespace, its memory and debug files masked, its tunables read-only.
fn mount_proc() -> std::io::Result<()> {
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
        None,
    )?;
    for name in PROC_READ_ONLY {
        let path = format!("/proc/{name}");
        if Path::new(&path).exists() {
            mount(Some(&path), &path, None, libc::MS_BIND | libc::MS_REC, None)?;
            mount(
                None,
                &path,
                None,
                libc::MS_BIND
                    | libc::MS_REMOUNT
                    | libc::MS_RDONLY
                    | libc::MS_NOSUID
                    | libc::MS_NODEV
                    | libc::MS_NOEXEC,
                None,
            )?;
        }
    }
    for name in PROC_MASKED_FILES {
        let path = format!("/proc/{name}");
        if Path::new(&path).exists() {
            mount(Some("/dev/null"), &path, None, libc::MS_BIND, None)?;
        }
    }
    Ok(())
}

/// A tmpfs `/dev` with the allowed nodes bound from the host's, the host's terminals, a
/// `shm` of this sandbox's own and the usual links; read-only once made.
fn mount_dev(devices: &[(&str, OwnedFd)], pts: Option<&OwnedFd>) -> std::io::Result<()> {
    mount(
        Some("tmpfs"),
        "/dev",
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("mode=755,size=64k,nr_inodes=64"),
    )?;
    for (name, fd) in devices {
        let target = Path::new("/dev").join(name);
        std::fs::File::create(&target)?;
        let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
        mount(
            Some(&source),
            &target.to_string_lossy(),
            None,
            libc::MS_BIND,
            None,
        )?;
    }
    if let Some(pts) = pts {
        std::fs::create_dir("/dev/pts")?;
        let source = format!("/proc/self/fd/{}", pts.as_raw_fd());
        mount(
            Some(&source),
            "/dev/pts",
            None,
            libc::MS_BIND | libc::MS_REC,
            None,
        )?;
        if !devices.iter().any(|(name, _)| *name == "ptmx") {
            std::os::unix::fs::symlink("pts/ptmx", "/dev/ptmx")?;
        }
    }
    std::fs::create_dir("/dev/shm")?;
    mount(
        Some("tmpfs"),
        "/dev/shm",
        Some("tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("mode=1777"),
    )?;
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, Path::new("/dev").join(link))?;
    }
    mount(
        None,
        "/dev",
        None,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NOEXEC,
        None,
    )
}

/// A user namespace whose only mapping is uid and gid 0 (the server's, on disk) to the
/// commands' user: the idmapping of the mapped paths. Made by a short-lived child.
fn mapping_namespace(uid: u32, gid: u32) -> std::io::Result<OwnedFd> {
    let (ready_read, ready_write) = nix::unistd::pipe().map_err(std::io::Error::from)?;
    let (go_read, go_write) = nix::unistd::pipe().map_err(std::io::Error::from)?;
    // SAFETY: this program is single-threaded; the child makes raw calls only, then _exit.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if child == 0 {
        // SAFETY: plain system calls on descriptors of this process, then _exit.
        unsafe {
            // The parent's ends: with them open here, the read below would never see an end.
            libc::close(go_write.as_raw_fd());
            libc::close(ready_read.as_raw_fd());
            let done = libc::unshare(libc::CLONE_NEWUSER);
            let byte = [u8::from(done == 0)];
            libc::write(ready_write.as_raw_fd(), byte.as_ptr().cast(), 1);
            let mut sink = [0u8; 1];
            libc::read(go_read.as_raw_fd(), sink.as_mut_ptr().cast(), 1);
            libc::_exit(0);
        }
    }
    drop(ready_write);
    drop(go_read);
    let finish = |result: std::io::Result<OwnedFd>| {
        drop(go_write);
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None);
        result
    };
    let mut byte = [0u8; 1];
    let read = nix::unistd::read(&ready_read, &mut byte).map_err(std::io::Error::from);
    if !matches!(read, Ok(1)) || byte[0] != 1 {
        return finish(Err(std::io::Error::other(
            "the mapping child could not make a user namespace",
        )));
    }
    let written = std::fs::write(format!("/proc/{child}/uid_map"), format!("0 {uid} 1"))
        .and_then(|()| std::fs::write(format!("/proc/{child}/gid_map"), format!("0 {gid} 1")));
    if let Err(err) = written {
        return finish(Err(err));
    }
    finish(std::fs::File::open(format!("/proc/{child}/ns/user")).map(OwnedFd::from))
}

// The new mount API (include/uapi/linux/mount.h).
const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Replaces `path` in this mount namespace by an idmapped copy of itself.
fn map_path(path: &Path, userns: &OwnedFd) -> std::io::Result<()> {
    let c_path = c_path(path)?;
    // SAFETY: a NUL-terminated path; the flags are the documented ones.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            c_path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_RECURSIVE,
        )
    };
    if tree < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: a valid attribute struct of the size passed, on the descriptor above.
    let set = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if set < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: moves the detached tree above onto `path`.
    let moved = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            c_path.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if moved < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn open_path(path: &Path) -> std::io::Result<OwnedFd> {
    let c_path = c_path(path)?;
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just opened.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn c_path(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL in a path"))
}

fn mount(
    source: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> std::io::Result<()> {
    let to_c = |text: &str| {
        CString::new(text).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a NUL in a mount argument",
            )
        })
    };
    let source = source.map(to_c).transpose()?;
    let target = to_c(target)?;
    let fstype = fstype.map(to_c).transpose()?;
    let data = data.map(to_c).transpose()?;
    let ptr = |value: &Option<CString>| value.as_ref().map_or(std::ptr::null(), |v| v.as_ptr());
    // SAFETY: NUL-terminated strings or null pointers, as mount(2) takes them.
    let mounted = unsafe {
        libc::mount(
            ptr(&source),
            target.as_ptr(),
            ptr(&fstype),
            flags,
            ptr(&data).cast(),
        )
    };
    if mounted < 0 {
        let err = std::io::Error::last_os_error();
        return Err(std::io::Error::new(
            err.kind(),
            format!("{}: {err}", target.to_string_lossy()),
        ));
    }
    Ok(())
}

/// PID 1's work: reap whatever ends, until the server's death ends this process (and with it,
/// the kernel ends every process of the namespace).
fn reap_forever() -> i32 {
    // SAFETY: a zeroed sigset is valid; the calls fill and apply it.
    let mut chld: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigemptyset(&mut chld);
        libc::sigaddset(&mut chld, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &chld, std::ptr::null_mut());
    }
    loop {
        loop {
            let mut status = 0;
            // SAFETY: waits for any child without blocking.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
        }
        let timeout = libc::timespec {
            tv_sec: 5,
            tv_nsec: 0,
        };
        // SAFETY: valid set and timeout; a blocked SIGCHLD is taken here instead of delivered.
        unsafe { libc::sigtimedwait(&chld, std::ptr::null_mut(), &timeout) };
    }
}
