//! The commands' system-call filter, always installed (where the architecture is known):
//!
//! - **no set-id files** (unless a task's container is the boundary): `chmod`, `fchmod`,
//!   `fchmodat`, `fchmodat2` with a set-user-id or set-group-id bit, and a file made by `open`,
//!   `openat`, `creat`, `mknod` or `mknodat` with one, fail with EPERM; `openat2`, whose mode
//!   the filter cannot read, fails with ENOSYS (C libraries then use `openat`);
//! - **no mounts** (where homes are hidden): the mount system calls fail with EPERM, so no
//!   command undoes the view of the files its mount namespace gives it, even as root;
//! - **no io_uring**, which can open files and sockets without the calls above;
//! - **`--network none`**: sockets other than Unix ones fail with EACCES, a datagram sent to a
//!   named address fails too, and every `connect` is handed to the server
//!   ([`crate::process::mediate`]), which connects only to sockets beneath the workspace or the
//!   private temporary folder. The filter is then installed with a notification listener; the
//!   child sends the listener to the server over a socket pair made before the clone, then
//!   closes its own copy before `exec`, so no command can answer its own notifications.
//!
//! Foreign system-call ABIs (x32, another architecture's) fail with EACCES.

#![allow(unsafe_code)] // installing a seccomp filter and passing a descriptor are raw calls

use std::os::fd::RawFd;

use nix::libc;
use sandbox_protocol::{Protection, ProtectionName};

use super::{ConfineRequest, check, protection};

/// A filter built once at start, shared by every command.
#[derive(Debug)]
pub struct Filter {
    program: Vec<libc::sock_filter>,
    /// Whether `connect` waits for the server's answer (a listener is sent to it).
    notify_connect: bool,
}

impl Filter {
    pub fn notifies_connect(&self) -> bool {
        self.notify_connect
    }

    /// The program, as the child needs it.
    pub fn program(&self) -> Program {
        Program {
            filter: self.program.as_ptr() as usize,
            len: self.program.len(),
            listener: self.notify_connect,
        }
    }
}

/// The filter (none on an architecture it does not know), and the protections it gives.
pub fn prepare(request: &ConfineRequest) -> (Option<Filter>, Vec<Protection>) {
    let rules = Rules {
        set_id: request.refuse_set_id,
        mounts: request.hide_homes,
        network_none: request.network_none,
    };
    let program = build(rules);
    let known = program.is_some();
    let unknown = "seccomp filters are not supported on this architecture";
    let network = if !request.network_none {
        let detail = request
            .network_detail
            .clone()
            .unwrap_or_else(|| "--network host: commands may use the network".to_owned());
        protection(ProtectionName::NetworkNone, false, detail)
    } else if known {
        protection(
            ProtectionName::NetworkNone,
            true,
            "seccomp refuses every socket but Unix sockets (and io_uring); Unix sockets connect only beneath the workspace and the private temporary folder",
        )
    } else {
        protection(ProtectionName::NetworkNone, false, unknown)
    };
    let set_id = if !request.refuse_set_id {
        protection(
            ProtectionName::NoSetId,
            false,
            "--files-anywhere: a task's container is the boundary, and its package manager may install set-id programs into the image's own files",
        )
    } else if known {
        protection(
            ProtectionName::NoSetId,
            true,
            "seccomp refuses every set-user-id and set-group-id bit (chmod, a created file's mode, mknod; openat2 and io_uring are refused), and the workspace is mounted nosuid where commands have a mount namespace",
        )
    } else {
        protection(ProtectionName::NoSetId, false, unknown)
    };
    let filter = program.map(|program| Filter {
        program,
        notify_connect: request.network_none,
    });
    (filter, vec![network, set_id])
}

/// A prepared program, as the child needs it: a pointer and a length, no allocation.
#[derive(Debug, Clone, Copy)]
pub struct Program {
    filter: usize,
    len: usize,
    listener: bool,
}

impl Program {
    /// Whether the program needs a channel to send its notification listener over.
    pub fn needs_channel(self) -> bool {
        self.listener
    }

    /// In the child (after `PR_SET_NO_NEW_PRIVS`): installs the filter; with a notification
    /// listener, sends the listener over `channel` and closes it.
    pub fn install_in_child(self, channel: Option<RawFd>) -> std::io::Result<()> {
        let program = libc::sock_fprog {
            len: self.len as u16,
            filter: self.filter as *mut libc::sock_filter,
        };
        if !self.listener {
            // SAFETY: the pointer is to the filter the `Confinement` keeps alive for the
            // server's whole life; the kernel only reads it.
            let installed = unsafe {
                libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0,
                    &program as *const libc::sock_fprog,
                )
            } as i32;
            return check(installed);
        }
        // No channel for the listener: refuse to run rather than run unfiltered.
        let channel = channel.ok_or_else(|| std::io::Error::from_raw_os_error(libc::EINVAL))?;
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

/// Which rules a filter holds.
#[derive(Debug, Clone, Copy)]
struct Rules {
    set_id: bool,
    mounts: bool,
    network_none: bool,
}

// Classic BPF (include/uapi/linux/filter.h, seccomp.h).
const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
/// `seccomp_data`: the call's number, then (after the architecture and the instruction
/// pointer) its six arguments, 8 bytes each; the low half of argument `i` is at `16 + 8 i`.
const NR: u32 = 0;
const ARCH: u32 = 4;
const fn arg(i: u32) -> u32 {
    16 + 8 * i
}
/// The set-user-id and set-group-id bits of a mode.
const SET_ID: u32 = 0o6000;
/// `O_CREAT | __O_TMPFILE`: an `open` whose mode is used.
const CREATES: u32 = 0o100 | 0o2000_0000;
/// `fchmodat2` (Linux 6.6), not yet named by every libc.
const SYS_FCHMODAT2: u32 = 452;

fn op(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// What a system call of a rule is checked for.
#[derive(Debug, Clone, Copy)]
enum Check {
    /// It fails with this verdict.
    Always(u32),
    /// It fails with this verdict when its argument `mode` has a set-id bit.
    Mode { mode: u32, ret: u32 },
    /// It fails with this verdict when its argument `flags` creates a file and its `mode` has a
    /// set-id bit.
    CreatedMode { flags: u32, mode: u32, ret: u32 },
}

/// A system call and its check.
type Rule = (u32, Check);

impl Check {
    /// The check's instructions, run with the call's number matched; each path ends in a
    /// verdict (a call that passes is allowed: no other rule names it).
    fn code(self) -> Vec<libc::sock_filter> {
        match self {
            Check::Always(ret) => vec![op(RET_K, 0, 0, ret)],
            Check::Mode { mode, ret } => vec![
                op(LD_W_ABS, 0, 0, arg(mode)),
                op(JSET_K, 0, 1, SET_ID),
                op(RET_K, 0, 0, ret),
                op(RET_K, 0, 0, RET_ALLOW),
            ],
            Check::CreatedMode { flags, mode, ret } => vec![
                op(LD_W_ABS, 0, 0, arg(flags)),
                op(JSET_K, 0, 3, CREATES),
                op(LD_W_ABS, 0, 0, arg(mode)),
                op(JSET_K, 0, 1, SET_ID),
                op(RET_K, 0, 0, ret),
                op(RET_K, 0, 0, RET_ALLOW),
            ],
        }
    }
}

/// The rules that keep set-id files from being made.
fn set_id_rules(eperm: u32) -> Vec<Rule> {
    let mode = |mode| Check::Mode { mode, ret: eperm };
    let created = |flags, mode| Check::CreatedMode {
        flags,
        mode,
        ret: eperm,
    };
    let mut rules = Vec::new();
    #[cfg(target_arch = "x86_64")]
    rules.extend([
        (libc::SYS_chmod as u32, mode(1)),
        (libc::SYS_creat as u32, mode(1)),
        (libc::SYS_mknod as u32, mode(1)),
        (libc::SYS_open as u32, created(1, 2)),
    ]);
    rules.extend([
        (libc::SYS_fchmod as u32, mode(1)),
        (libc::SYS_fchmodat as u32, mode(2)),
        (SYS_FCHMODAT2, mode(2)),
        (libc::SYS_mknodat as u32, mode(2)),
        (libc::SYS_openat as u32, created(2, 3)),
        (
            libc::SYS_openat2 as u32,
            Check::Always(RET_ERRNO | libc::ENOSYS as u32),
        ),
    ]);
    rules
}

/// The mount system calls: no command changes its view of the files.
fn mount_rules(eperm: u32) -> Vec<Rule> {
    [
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
    ]
    .into_iter()
    .map(|nr| (nr as u32, Check::Always(eperm)))
    .collect()
}

/// `--network none`: sockets other than `AF_UNIX` and `sendto` with an address fail with
/// EACCES; `connect` waits for the server's answer.
fn network_rules(eacces: u32) -> Vec<libc::sock_filter> {
    vec![
        op(LD_W_ABS, 0, 0, NR),
        op(JEQ_K, 0, 1, libc::SYS_connect as u32),
        op(RET_K, 0, 0, libc::SECCOMP_RET_USER_NOTIF),
        // sendto(…, dest_addr, …): a datagram to a named socket is refused; NULL passes.
        op(JEQ_K, 0, 6, libc::SYS_sendto as u32),
        op(LD_W_ABS, 0, 0, arg(4)),
        op(JEQ_K, 0, 2, 0),
        op(LD_W_ABS, 0, 0, arg(4) + 4),
        op(JEQ_K, 1, 0, 0),
        op(RET_K, 0, 0, eacces),
        op(RET_K, 0, 0, RET_ALLOW),
        op(JEQ_K, 1, 0, libc::SYS_socket as u32),
        op(RET_K, 0, 0, RET_ALLOW),
        op(LD_W_ABS, 0, 0, arg(0)), // the domain (low 32 bits)
        op(JEQ_K, 0, 1, libc::AF_UNIX as u32),
        op(RET_K, 0, 0, RET_ALLOW),
        op(RET_K, 0, 0, eacces),
    ]
}

/// The program: foreign ABIs fail with EACCES; then the call's number is compared once with
/// each rule's (a call no rule names passes one comparison per rule), a match jumping to its
/// check; then, under `--network none`, the socket rules; every other call is allowed.
fn build(rules: Rules) -> Option<Vec<libc::sock_filter>> {
    #[cfg(target_arch = "x86_64")]
    let arch: u32 = 0xC000_003E;
    #[cfg(target_arch = "aarch64")]
    let arch: u32 = 0xC000_00B7;
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    return None;
    let eacces = RET_ERRNO | libc::EACCES as u32;
    let eperm = RET_ERRNO | libc::EPERM as u32;
    let mut program = vec![
        op(LD_W_ABS, 0, 0, ARCH),
        op(JEQ_K, 1, 0, arch),
        op(RET_K, 0, 0, eacces),
        op(LD_W_ABS, 0, 0, NR),
    ];
    if cfg!(target_arch = "x86_64") {
        // x32 system calls carry bit 30; refuse them rather than mirror the whole table.
        program.push(op(JGE_K, 0, 1, 0x4000_0000));
        program.push(op(RET_K, 0, 0, eacces));
    }
    // io_uring can open files and sockets without the calls below.
    let mut table: Vec<Rule> = vec![(libc::SYS_io_uring_setup as u32, Check::Always(eacces))];
    if rules.set_id {
        table.extend(set_id_rules(eperm));
    }
    if rules.mounts {
        table.extend(mount_rules(eperm));
    }
    // Ends with a verdict for every call.
    let tail = if rules.network_none {
        network_rules(eacces)
    } else {
        vec![op(RET_K, 0, 0, RET_ALLOW)]
    };
    let checks: Vec<Vec<libc::sock_filter>> = table.iter().map(|(_, c)| c.code()).collect();
    // From the comparison of rule `i`: the comparisons after it, the tail, then the checks of
    // the rules before it.
    let mut offset = table.len() + tail.len();
    for (i, (nr, _)) in table.iter().enumerate() {
        let jump = offset - (i + 1);
        // Jumps are 8 bits: the tables above are far from that many instructions.
        let jump = u8::try_from(jump).ok()?;
        program.push(op(JEQ_K, jump, 0, *nr));
        offset += checks[i].len();
    }
    program.extend(tail);
    program.extend(checks.into_iter().flatten());
    Some(program)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program on one call, as the kernel would: a small interpreter of the
    /// instructions the program uses.
    fn verdict(program: &[libc::sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, value) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&value.to_le_bytes());
        }
        let (mut pc, mut a) = (0usize, 0u32);
        for _ in 0..program.len() {
            let ins = program[pc];
            let next = |taken: bool| pc + 1 + usize::from(if taken { ins.jt } else { ins.jf });
            pc = match ins.code {
                LD_W_ABS => {
                    let at = ins.k as usize;
                    a = u32::from_le_bytes(data[at..at + 4].try_into().expect("4 bytes"));
                    pc + 1
                }
                JEQ_K => next(a == ins.k),
                JGE_K => next(a >= ins.k),
                JSET_K => next(a & ins.k != 0),
                RET_K => return ins.k,
                other => panic!("an instruction the interpreter does not know: {other:#x}"),
            };
        }
        panic!("the program ran past its end");
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_filter_refuses_set_id_bits_mounts_and_foreign_sockets_only() {
        const ARCH: u32 = 0xC000_003E;
        let program = build(Rules {
            set_id: true,
            mounts: true,
            network_none: true,
        })
        .expect("x86_64");
        let eperm = RET_ERRNO | libc::EPERM as u32;
        let eacces = RET_ERRNO | libc::EACCES as u32;
        let call = |nr: i64, args: [u64; 6]| verdict(&program, ARCH, nr as u32, args);
        let creat = (libc::O_CREAT | libc::O_WRONLY) as u64;
        for (what, nr, args, expected) in [
            (
                "chmod 4755",
                libc::SYS_chmod,
                [0, 0o4755, 0, 0, 0, 0],
                eperm,
            ),
            (
                "chmod 755",
                libc::SYS_chmod,
                [0, 0o755, 0, 0, 0, 0],
                RET_ALLOW,
            ),
            (
                "fchmodat 2777",
                libc::SYS_fchmodat,
                [0, 0, 0o2777, 0, 0, 0],
                eperm,
            ),
            ("fchmodat2 6755", 452, [0, 0, 0o6755, 0, 0, 0], eperm),
            (
                "openat creat 4755",
                libc::SYS_openat,
                [0, 0, creat, 0o4755, 0, 0],
                eperm,
            ),
            (
                "openat creat 644",
                libc::SYS_openat,
                [0, 0, creat, 0o644, 0, 0],
                RET_ALLOW,
            ),
            (
                "openat read, garbage mode",
                libc::SYS_openat,
                [0, 0, 0, 0o4755, 0, 0],
                RET_ALLOW,
            ),
            (
                "mknod 104755",
                libc::SYS_mknod,
                [0, 0o104_755, 0, 0, 0, 0],
                eperm,
            ),
            (
                "openat2",
                libc::SYS_openat2,
                [0; 6],
                RET_ERRNO | libc::ENOSYS as u32,
            ),
            ("mount", libc::SYS_mount, [0; 6], eperm),
            ("umount2", libc::SYS_umount2, [0; 6], eperm),
            ("io_uring_setup", libc::SYS_io_uring_setup, [0; 6], eacces),
            ("read", libc::SYS_read, [0; 6], RET_ALLOW),
            (
                "connect",
                libc::SYS_connect,
                [0; 6],
                libc::SECCOMP_RET_USER_NOTIF,
            ),
            (
                "socket inet",
                libc::SYS_socket,
                [libc::AF_INET as u64, 0, 0, 0, 0, 0],
                eacces,
            ),
            (
                "socket unix",
                libc::SYS_socket,
                [libc::AF_UNIX as u64, 0, 0, 0, 0, 0],
                RET_ALLOW,
            ),
            ("sendto named", libc::SYS_sendto, [0, 0, 0, 0, 1, 0], eacces),
            ("sendto connected", libc::SYS_sendto, [0; 6], RET_ALLOW),
            ("an x32 call", 0x4000_0001, [0; 6], eacces),
        ] {
            assert_eq!(call(nr, args), expected, "{what}");
        }
        assert_eq!(
            verdict(&program, 0x4000_0003, 0, [0; 6]),
            eacces,
            "a foreign arch"
        );
        let plain = build(Rules {
            set_id: false,
            mounts: false,
            network_none: false,
        })
        .expect("x86_64");
        for nr in [
            libc::SYS_chmod,
            libc::SYS_mount,
            libc::SYS_socket,
            libc::SYS_connect,
        ] {
            assert_eq!(
                verdict(&plain, ARCH, nr as u32, [0, 0o4755, 0, 0, 0, 0]),
                RET_ALLOW
            );
        }
        assert_eq!(
            verdict(&plain, ARCH, libc::SYS_io_uring_setup as u32, [0; 6]),
            eacces
        );
    }
}
