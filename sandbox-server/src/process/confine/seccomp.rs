//! `--network none`: a seccomp filter under which sockets other than Unix ones (and io_uring,
//! which can open sockets without `socket`) fail with EACCES, a datagram sent to a named
//! address fails too, and every `connect` is handed to the server ([`crate::process::mediate`]),
//! which connects only to sockets beneath the workspace or the private temporary folder.
//!
//! The filter is installed with a notification listener; the child sends the listener to the
//! server over a socket pair made before the clone, then closes its own copy before `exec`, so
//! no command can answer its own notifications.

#![allow(unsafe_code)] // installing a seccomp filter and passing a descriptor are raw calls

use std::os::fd::RawFd;

use nix::libc;
use sandbox_protocol::{Protection, ProtectionName};

use super::{check, protection};

/// The filter (none on an architecture it does not know), and the protection.
pub fn prepare() -> (Option<Vec<libc::sock_filter>>, Protection) {
    let filter = seccomp_filter();
    let detail = match &filter {
        Some(_) => {
            "seccomp refuses every socket but Unix sockets (and io_uring); Unix sockets connect only beneath the workspace and the private temporary folder"
        }
        None => "seccomp filters are not supported on this architecture",
    };
    let active = filter.is_some();
    (
        filter,
        protection(ProtectionName::NetworkNone, active, detail),
    )
}

/// A prepared program, as the child needs it: a pointer and a length, no allocation.
#[derive(Debug, Clone, Copy)]
pub struct Program {
    filter: usize,
    len: usize,
}

impl Program {
    /// The program of a filter that lives as long as the server (the `Confinement` owns it).
    pub fn of(filter: &[libc::sock_filter]) -> Program {
        Program {
            filter: filter.as_ptr() as usize,
            len: filter.len(),
        }
    }

    /// In the child (after `PR_SET_NO_NEW_PRIVS`): installs the filter with a notification
    /// listener, sends the listener over `channel` and closes it.
    pub fn install_in_child(self, channel: RawFd) -> std::io::Result<()> {
        let program = libc::sock_fprog {
            len: self.len as u16,
            filter: self.filter as *mut libc::sock_filter,
        };
        // SAFETY: the pointer is to the filter the `Confinement` keeps alive for the server's
        // whole life; the kernel only reads it.
        let listener = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                &program as *const libc::sock_fprog,
            )
        } as i32;
        check(listener)?;
        let sent = send_fd(channel, listener);
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(listener) };
        sent
    }
}

/// Sends `fd` over the Unix socket `channel` (SCM_RIGHTS), with buffers on the stack only.
fn send_fd(channel: RawFd, fd: RawFd) -> std::io::Result<()> {
    #[repr(C)]
    struct Control {
        header: libc::cmsghdr,
        fd: RawFd,
        _pad: u32,
    }
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: plain data; every field is set below.
    let mut control: Control = unsafe { std::mem::zeroed() };
    control.header.cmsg_len =
        (std::mem::size_of::<libc::cmsghdr>() + std::mem::size_of::<RawFd>()) as _;
    control.header.cmsg_level = libc::SOL_SOCKET;
    control.header.cmsg_type = libc::SCM_RIGHTS;
    control.fd = fd;
    // SAFETY: plain data; every field used is set below.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &mut iov;
    message.msg_iovlen = 1;
    message.msg_control = (&mut control as *mut Control).cast();
    message.msg_controllen = std::mem::size_of::<Control>() as _;
    // SAFETY: every pointer in `message` is to a live stack value.
    let sent = unsafe { libc::sendmsg(channel, &message, libc::MSG_NOSIGNAL) };
    check(if sent < 0 { -1 } else { 0 })
}

/// The seccomp program for `--network none`: sockets other than `AF_UNIX`, io_uring (which can
/// open sockets without the `socket` call) and `sendto` with an address fail with EACCES;
/// `connect` waits for the server's answer; foreign system-call ABIs fail.
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
        op(JEQ_K, 0, 1, libc::SYS_connect as u32),
        op(RET_K, 0, 0, libc::SECCOMP_RET_USER_NOTIF),
        // sendto(…, dest_addr, …): a datagram to a named socket is refused; NULL passes.
        op(JEQ_K, 0, 6, libc::SYS_sendto as u32),
        op(LD_W_ABS, 0, 0, 48), // args[4], low half
        op(JEQ_K, 0, 2, 0),
        op(LD_W_ABS, 0, 0, 52), // args[4], high half
        op(JEQ_K, 1, 0, 0),
        op(RET_K, 0, 0, ret_errno),
        op(RET_K, 0, 0, RET_ALLOW),
        op(JEQ_K, 1, 0, libc::SYS_socket as u32),
        op(RET_K, 0, 0, RET_ALLOW),
        op(LD_W_ABS, 0, 0, 16), // args[0], the domain (low 32 bits)
        op(JEQ_K, 0, 1, libc::AF_UNIX as u32),
        op(RET_K, 0, 0, RET_ALLOW),
        op(RET_K, 0, 0, ret_errno),
    ]);
    Some(program)
}
