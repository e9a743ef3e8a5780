//! Under `--network none` every `connect` a command makes waits here (a seccomp notification)
//! and the server answers it: a Unix socket beneath the workspace or the private temporary
//! folder is connected on the command's behalf; anything else (a container engine's socket,
//! the host's D-Bus, an abstract socket outside the commands' network namespace) fails with EACCES.
//!
//! Nothing the command controls is trusted after the check: its socket is taken with
//! `pidfd_getfd`, the socket file is opened `O_PATH` beneath the allowed folder with
//! `openat2(RESOLVE_BENEATH)`, and the server connects the command's socket to that very file
//! (through `/proc/self/fd`). The command's memory is read once, and the notification is
//! checked to still be pending before the answer is acted on.

#![allow(unsafe_code)] // seccomp notification ioctls and pidfd calls have no safe wrapper

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::libc;
use nix::sys::stat::Mode;
use tokio::io::unix::AsyncFd;

/// Where commands may connect: folders (with a descriptor each) beneath which sockets are
/// allowed, and whether abstract sockets are (only in the commands' own network namespace).
#[derive(Debug)]
pub struct Allowed {
    roots: Vec<(PathBuf, OwnedFd)>,
    abstract_sockets: bool,
}

impl Allowed {
    pub fn new(folders: &[&Path], abstract_sockets: bool) -> std::io::Result<Allowed> {
        let mut roots = Vec::new();
        for folder in folders {
            let canonical = folder.canonicalize()?;
            let fd = nix::fcntl::open(
                &canonical,
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )?;
            roots.push((canonical, fd));
        }
        Ok(Allowed {
            roots,
            abstract_sockets,
        })
    }
}

/// Answers a call's notifications until every process under its filter is gone.
pub fn serve(listener: OwnedFd, allowed: Arc<Allowed>) {
    tokio::spawn(async move {
        // SAFETY: the `OwnedFd` is moved in and neither replaced nor closed while registered.
        let Ok(listener) = (unsafe { AsyncFd::register(listener) }) else {
            tracing::error!("could not watch a seccomp listener: its commands' connects will fail");
            return;
        };
        loop {
            let Ok(mut ready) = listener.readable().await else {
                return;
            };
            if ready.ready().is_read_closed() {
                return; // every process of the call is gone
            }
            let fd = listener.get_ref().as_raw_fd();
            // The receive blocks until a notification comes, so it is made only when one is
            // pending: the readiness kept from the last one answered says nothing of the next,
            // and a receive made on it held this worker thread until the call's processes
            // ended (with two such calls, the whole server).
            if !pending(fd) {
                ready.clear_ready();
                continue;
            }
            let allowed = allowed.clone();
            // Off the async threads: connecting may block (a full backlog on a blocking
            // socket), and so could the receive, should the pending notification be withdrawn
            // (its process killed) between the poll and it. The listener outlives the wait.
            // Not `sandbox::blocking` (the tools' helper, a layer above): a failure is logged.
            let answered = tokio::task::spawn_blocking(move || {
                let Some(notification) = receive(fd) else {
                    return;
                };
                let errno = decide(fd, &notification, &allowed);
                respond(fd, notification.id, errno);
            })
            .await;
            if answered.is_err() {
                tracing::error!("answering a connect failed");
            }
        }
    });
}

/// Whether a notification waits to be received (`POLLIN`, which the kernel reports level-wise).
fn pending(listener: RawFd) -> bool {
    let mut poll = libc::pollfd {
        fd: listener,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid `pollfd`, a zero timeout: it only reads the listener's state.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready > 0 && poll.revents & libc::POLLIN != 0
}

/// The next notification; `None` when the one that was pending was withdrawn (its process
/// died) or the listener failed.
fn receive(listener: RawFd) -> Option<libc::seccomp_notif> {
    // SAFETY: plain data, filled by the kernel.
    let mut notification: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: the ioctl writes a `seccomp_notif` into the struct passed.
    let received =
        unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut notification) };
    (received == 0).then_some(notification)
}

fn respond(listener: RawFd, id: u64, errno: i32) {
    let response = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: -errno,
        flags: 0,
    };
    // SAFETY: the ioctl reads the response struct passed. A target gone meanwhile is ENOENT.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SEND, &response) };
}

/// Whether the notification still waits (its process has not died, its pid not been reused).
fn still_pending(listener: RawFd, id: u64) -> bool {
    // SAFETY: the ioctl reads a u64.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0 }
}

/// The errno the command's `connect` returns (0: connected).
fn decide(listener: RawFd, notification: &libc::seccomp_notif, allowed: &Allowed) -> i32 {
    let pid = notification.pid;
    let [sockfd, address, length, ..] = notification.data.args;
    if notification.data.nr != libc::SYS_connect as i32 {
        return libc::ENOSYS;
    }
    let Some(bytes) = read_memory(pid, address, length) else {
        return libc::EFAULT;
    };
    if !still_pending(listener, notification.id) {
        return libc::EINTR;
    }
    let target = match target(pid, &bytes, allowed) {
        Ok(target) => target,
        Err(errno) => return errno,
    };
    let Some(socket) = take_socket(pid, sockfd as RawFd) else {
        return libc::EBADF;
    };
    if !still_pending(listener, notification.id) {
        return libc::EINTR;
    }
    connect(&socket, &target)
}

/// Reads a `sockaddr` of `length` bytes at `address` in the process's memory.
fn read_memory(pid: u32, address: u64, length: u64) -> Option<Vec<u8>> {
    let length = usize::try_from(length)
        .ok()?
        .min(std::mem::size_of::<libc::sockaddr_un>());
    let mut bytes = vec![0u8; length];
    let memory = File::open(format!("/proc/{pid}/mem")).ok()?;
    memory.read_exact_at(&mut bytes, address).ok()?;
    Some(bytes)
}

/// Where a connect may go: the address to connect to (`/proc/self/fd/N` of a socket file
/// opened beneath an allowed folder, or an abstract name), or the errno refusing it.
enum Target {
    File(OwnedFd),
    Abstract(Vec<u8>),
}

fn target(pid: u32, address: &[u8], allowed: &Allowed) -> Result<Target, i32> {
    let family = address.get(..2).map(|f| u16::from_ne_bytes([f[0], f[1]]));
    if family != Some(libc::AF_UNIX as u16) {
        return Err(libc::EACCES);
    }
    let path = &address[2..];
    if path.first() == Some(&0) {
        return if allowed.abstract_sockets {
            Ok(Target::Abstract(path.to_vec()))
        } else {
            Err(libc::EACCES)
        };
    }
    let path = &path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())];
    let path = Path::new(OsStr::from_bytes(path));
    let absolute = if path.is_absolute() {
        path.to_owned()
    } else {
        std::fs::read_link(format!("/proc/{pid}/cwd"))
            .map_err(|_| libc::EACCES)?
            .join(path)
    };
    for (root, fd) in &allowed.roots {
        let Ok(beneath) = absolute.strip_prefix(root) else {
            continue;
        };
        let how = OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        return match openat2(fd, beneath, how) {
            Ok(file) => Ok(Target::File(file)),
            Err(nix::errno::Errno::ENOENT) => Err(libc::ENOENT),
            Err(_) => Err(libc::EACCES),
        };
    }
    Err(libc::EACCES)
}

/// The command's socket, as a descriptor of the server's.
fn take_socket(pid: u32, sockfd: RawFd) -> Option<OwnedFd> {
    // SAFETY: raw system calls with integer arguments; the results are checked.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) } as i32;
    if pidfd < 0 {
        return None;
    }
    // SAFETY: just opened.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    // SAFETY: as above.
    let socket =
        unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), sockfd, 0) } as i32;
    // SAFETY: the kernel just gave us this descriptor.
    (socket >= 0).then(|| unsafe { OwnedFd::from_raw_fd(socket) })
}

/// Connects `socket` (shared with the command) to the target; the errno, 0 on success.
fn connect(socket: &OwnedFd, target: &Target) -> i32 {
    // SAFETY: plain data; the family and path are set below.
    let mut address: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    address.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let name: Vec<u8> = match target {
        Target::File(fd) => format!("/proc/self/fd/{}", fd.as_raw_fd()).into_bytes(),
        Target::Abstract(name) => name.clone(),
    };
    if name.len() > address.sun_path.len() {
        return libc::ENAMETOOLONG;
    }
    for (slot, byte) in address.sun_path.iter_mut().zip(&name) {
        *slot = *byte as libc::c_char;
    }
    let length = std::mem::size_of::<libc::sa_family_t>()
        + name.len()
        + usize::from(matches!(target, Target::File(_)));
    // SAFETY: `address` is a valid sockaddr_un of the length given.
    let result = unsafe {
        libc::connect(
            socket.as_raw_fd(),
            (&address as *const libc::sockaddr_un).cast(),
            length as libc::socklen_t,
        )
    };
    if result == 0 {
        0
    } else {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    }
}

/// A socket pair for a child to send its listener over: (the server's end, the child's end).
pub fn channel() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair writes two descriptors into the array passed.
    let made = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if made < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both were just created and are ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The listener a child sent before it executed (so it is already there).
pub fn receive_listener(channel: &OwnedFd) -> std::io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = [0u64; 8];
    // SAFETY: plain data; the fields used are set below.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: every pointer in `message` is to a live local.
    let received = unsafe {
        libc::recvmsg(
            channel.as_raw_fd(),
            &mut message,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if received < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel filled `message`; the macros walk its control buffer.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&message);
        if header.is_null()
            || (*header).cmsg_level != libc::SOL_SOCKET
            || (*header).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(std::io::Error::other(
                "the command sent no seccomp listener",
            ));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<RawFd>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}
