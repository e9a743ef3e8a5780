//! `sandbox-server pid-init`: the init of the commands' namespaces.
//!
//! It runs as a fresh, single-threaded program (the server clones it and it executes this
//! binary), so it may allocate and call anything. A root server clones it into a new PID and
//! mount namespace; a server that is not root starts it plainly, and it makes a user namespace
//! of its own (its user mapped to itself, so commands that join it hold no privilege there) and
//! a mount namespace in it. In order: die with the server, become undumpable, keep the host's
//! mounts from leaking either way, take copies of what commands see again (the workspace, with
//! the server's files mapped to the commands' user where asked, never honouring set-id bits;
//! the toolchains, read-only), hide the homes and the rest of the [`View`](super::super::view)
//! under empty read-only file systems, put the copies back at their own paths, then (in a PID
//! namespace) mount a `/proc` of it with the kernel's memory and debug files masked and a `/dev`
//! with only the nodes programs need, say `ready`, and reap orphans until it is killed. The
//! first line on standard output is the server's answer: `ready`, or what failed. A server that
//! is not root cannot open this process's namespaces through `/proc` (it is not dumpable), so
//! they are sent over standard input, a Unix socket, before `ready`.

#![allow(unsafe_code)] // mount API system calls without a wrapper, prctl, sigtimedwait

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use nix::libc;

mod mounts;

use mounts::{
    MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY, attach, copy_tree, mount, open_path,
};

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
    /// The server is not root: make a user namespace of its own first, and no PID namespace
    /// (`/proc` and `/dev` stay the host's).
    pub own_user: bool,
    /// Hidden paths: a folder under an empty read-only tmpfs, a file under an empty file.
    pub hide: Vec<PathBuf>,
    /// Shown again read-write at their own path, set-id bits not honoured.
    pub keep: Vec<PathBuf>,
    /// Shown again read-only at their own path.
    pub read_only: Vec<PathBuf>,
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
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    if !spec.own_user {
        // A process that is not dumpable cannot write its own uid map (its /proc files become
        // root's): a server that is not root has the init do this once the map is written.
        not_dumpable();
    }
    if let Err(why) = set_up(spec).and_then(|()| {
        if spec.own_user {
            send_namespaces().map_err(|err| format!("sending the namespaces to the server: {err}"))
        } else {
            Ok(())
        }
    }) {
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

/// The namespaces' setup, in the order the module's header gives; an error says which step
/// failed.
fn set_up(spec: &InitSpec) -> Result<(), String> {
    if spec.own_user {
        own_user_namespace().map_err(|err| format!("making a user namespace: {err}"))?;
    }
    mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE, None)
        .map_err(|err| format!("making the mounts private: {err}"))?;
    let null = open_path(Path::new("/dev/null")).map_err(|err| format!("/dev/null: {err}"))?;
    // The host's device nodes, reached before a new /dev hides them.
    let devices = host_devices();
    let pts = open_path(Path::new("/dev/pts")).ok();
    if !spec.own_user {
        // First: the mapping child's pid below is this namespace's, which only this /proc knows.
        mount_proc().map_err(|err| format!("mounting /proc: {err}"))?;
    }
    let userns = match spec.run_as {
        Some((uid, gid)) => Some(mapping_namespace(uid, gid).map_err(|err| {
            format!("{MAPPING_ERROR}: making the uid map for {uid}:{gid}: {err}")
        })?),
        None => None,
    };
    let shown = copies(spec, userns.as_ref())?;
    let hiders = apply_view(spec, &shown, &null)?;
    seal(&hiders)?;
    if spec.own_user {
        return Ok(());
    }
    mount_dev(&devices, pts.as_ref()).map_err(|err| format!("mounting /dev: {err}"))?;
    mask_dirs()
}

/// The host's device nodes of [`DEVICES`] that exist, opened by path.
fn host_devices() -> Vec<(&'static str, OwnedFd)> {
    DEVICES
        .iter()
        .filter_map(|name| {
            open_path(&Path::new("/dev").join(name))
                .ok()
                .map(|fd| (*name, fd))
        })
        .collect()
}

/// Hides the hidden paths and puts the `shown` copies back, outer paths first. Returns the
/// folders hidden under a tmpfs, still writable: the shown paths inside them needed folders
/// made in them.
fn apply_view(
    spec: &InitSpec,
    shown: &[(PathBuf, OwnedFd)],
    null: &OwnedFd,
) -> Result<Vec<PathBuf>, String> {
    let mut steps: Vec<Step<'_>> = spec.hide.iter().map(|path| Step::Hide(path)).collect();
    steps.extend(shown.iter().map(|(path, tree)| Step::Show(path, tree)));
    // Outer paths first: a shown path inside a hidden one appears after it is hidden, and a
    // hidden path inside a shown one is hidden in the copy put back.
    steps.sort_by_key(Step::order);
    let mut hiders = Vec::new();
    for step in &steps {
        match step {
            Step::Hide(path) => {
                if let Some(tmpfs) =
                    hide(path, null).map_err(|err| format!("hiding {}: {err}", path.display()))?
                {
                    hiders.push(tmpfs);
                }
            }
            Step::Show(path, tree) => show(path, tree)
                .map_err(|err| format!("showing {} again: {err}", path.display()))?,
        }
    }
    Ok(hiders)
}

/// Makes each hiding tmpfs read-only, once every shown path is in place.
fn seal(hiders: &[PathBuf]) -> Result<(), String> {
    for folder in hiders {
        // Read-only once the folders to put the shown paths in were made.
        mount(
            None,
            &folder.to_string_lossy(),
            None,
            libc::MS_REMOUNT
                | libc::MS_BIND
                | libc::MS_RDONLY
                | libc::MS_NOSUID
                | libc::MS_NODEV
                | libc::MS_NOEXEC,
            None,
        )
        .map_err(|err| format!("making {} read-only: {err}", folder.display()))?;
    }
    Ok(())
}

/// Hides [`MASKED_DIRS`] (those that exist) behind an empty read-only tmpfs.
fn mask_dirs() -> Result<(), String> {
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

/// One change to the commands' view of the files.
enum Step<'a> {
    Hide(&'a Path),
    Show(&'a Path, &'a OwnedFd),
}

impl Step<'_> {
    /// Shallower paths first; at the same path, hiding before showing.
    fn order(&self) -> (usize, u8) {
        match self {
            Step::Hide(path) => (path.components().count(), 0),
            Step::Show(path, _) => (path.components().count(), 1),
        }
    }
}

/// A user namespace in which this process's user and group are mapped to themselves, then a
/// mount namespace in it: this process holds every capability there (until it would execute
/// another program, which it never does); commands that join hold none, as their user is not
/// the namespace's root.
fn own_user_namespace() -> std::io::Result<()> {
    let (uid, gid) = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    // SAFETY: unshare with flags only.
    super::super::check(unsafe { libc::unshare(libc::CLONE_NEWUSER) })?;
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    not_dumpable();
    // SAFETY: unshare with flags only.
    super::super::check(unsafe { libc::unshare(libc::CLONE_NEWNS) })
}

fn not_dumpable() {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
}

/// Sends this process's user and mount namespaces over standard input (a Unix socket the
/// server holds the other end of), since the server may not open them through `/proc`.
fn send_namespaces() -> std::io::Result<()> {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    let user = std::fs::File::open("/proc/self/ns/user")?;
    let mnt = std::fs::File::open("/proc/self/ns/mnt")?;
    let fds = [user.as_raw_fd(), mnt.as_raw_fd()];
    let iov = [std::io::IoSlice::new(b"n")];
    sendmsg::<()>(
        0,
        &iov,
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )?;
    Ok(())
}

/// Detached copies of the paths shown again, taken before anything is hidden: read-write ones
/// never honour set-id bits or device nodes, and are mapped to the commands' user where the
/// server asked; read-only ones are read-only.
fn copies(spec: &InitSpec, userns: Option<&OwnedFd>) -> Result<Vec<(PathBuf, OwnedFd)>, String> {
    let mut copies = Vec::new();
    for path in &spec.keep {
        let mapped = spec.map.contains(path);
        let idmap = userns.filter(|_| mapped);
        let tree = copy_tree(path, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, idmap).map_err(|err| {
            if mapped {
                format!(
                    "{MAPPING_ERROR} {}: the server's files there cannot be made the commands' user's (an idmapped mount: {err}); run commands as the workspace's owner (--run-as), or put the workspace on a file system that supports idmapped mounts",
                    path.display()
                )
            } else {
                format!("copying the mount of {}: {err}", path.display())
            }
        })?;
        copies.push((path.clone(), tree));
    }
    for path in &spec.read_only {
        let tree = copy_tree(
            path,
            MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            None,
        )
        .map_err(|err| format!("copying the mount of {}: {err}", path.display()))?;
        copies.push((path.clone(), tree));
    }
    Ok(copies)
}

/// Hides `path`: a folder under an empty tmpfs (returned, to be made read-only later), a file
/// or socket under the empty `/dev/null`. A path no longer in the view (inside a folder hidden
/// before) is left.
fn hide(path: &Path, null: &OwnedFd) -> std::io::Result<Option<PathBuf>> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(None);
    };
    let target = path.to_string_lossy();
    if meta.is_dir() {
        mount(
            Some("tmpfs"),
            &target,
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some("mode=755,size=1m,nr_inodes=4096"),
        )?;
        Ok(Some(path.to_owned()))
    } else {
        let source = format!("/proc/self/fd/{}", null.as_raw_fd());
        mount(Some(&source), &target, None, libc::MS_BIND, None)?;
        Ok(None)
    }
}

/// Puts a copy back at `path`, making the folders on the way (inside a hidden tmpfs) first.
fn show(path: &Path, tree: &OwnedFd) -> std::io::Result<()> {
    if std::fs::symlink_metadata(path).is_err() {
        let is_dir = {
            // SAFETY: a zeroed stat buffer is valid; fstat fills it.
            let mut stat: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: a descriptor of ours and a valid buffer.
            super::super::check(unsafe { libc::fstat(tree.as_raw_fd(), &mut stat) })?;
            stat.st_mode & libc::S_IFMT == libc::S_IFDIR
        };
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(parent)?;
        }
        if is_dir {
            std::fs::DirBuilder::new().mode(0o755).create(path)?;
        } else {
            std::fs::File::create(path)?;
        }
    }
    attach(tree, path)
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
