//! Starting a confined command without copying the server: `clone(CLONE_VM | CLONE_VFORK)`.
//!
//! A `fork` of the multi-threaded server copies its page tables, makes every page it writes
//! afterwards a copy-on-write fault, and has the child tear the copy down again at `exec`: about
//! a fifth of a `bash` call's CPU. Here the child borrows the server's memory on a stack of its
//! own and the calling thread waits until it has called `execve` (or failed), as glibc's
//! `posix_spawn` does; unlike `posix_spawn`, the confinement runs between the clone and the exec.
//!
//! The rules for the child, which runs in the server's memory:
//! - only raw system calls on values prepared before the clone: no allocation, no lock, no
//!   glibc function that touches the thread list (`setuid` and friends go through `syscall`);
//! - every signal is blocked around the clone, and the child resets every disposition it
//!   inherited before unblocking, so no handler of the server ever runs in it;
//! - a failure is written as `(stage, errno)` to a close-on-exec pipe, then `_exit(127)`.

#![allow(unsafe_code)] // clone, execve and the raw calls between them

use std::ffi::{CStr, CString, c_void};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::libc;

/// What to run: everything the child needs, as C values made before the clone.
#[derive(Debug)]
pub(super) struct Command {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: CString,
}

/// A started command: its pid and the read ends of its output pipes (none on a terminal).
#[derive(Debug)]
pub(super) struct Child {
    pub(super) pid: u32,
    pub(super) output: Option<(OwnedFd, OwnedFd)>,
}

/// Where a child's standard streams go.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stdio {
    /// This descriptor as standard input, new pipes for standard output and error.
    Pipes { stdin: RawFd },
    /// A terminal's slave end as all three (the caller keeps the master).
    Terminal { slave: RawFd },
}

/// The child's own stack. Its work is a few dozen system calls.
const STACK: usize = 64 * 1024;

/// Where a child failed, for the error message.
const STAGES: [&str; 4] = [
    "connecting stdin, stdout and stderr",
    "entering the working directory",
    "confining the command",
    "executing the program",
];

fn c_string(what: &str, bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} contains a NUL byte"),
        )
    })
}

impl Command {
    /// `program` is a path (see [`find_program`]); `env` is the whole environment.
    pub(super) fn new<'a>(
        program: &CStr,
        args: &[&str],
        env: impl IntoIterator<Item = (&'a str, &'a str)>,
        cwd: &std::path::Path,
    ) -> io::Result<Command> {
        let mut argv = vec![program.to_owned()];
        for arg in args {
            argv.push(c_string("an argument", arg.as_bytes())?);
        }
        let envp = env
            .into_iter()
            .map(|(key, value)| {
                c_string(
                    "an environment variable",
                    format!("{key}={value}").as_bytes(),
                )
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Command {
            program: program.to_owned(),
            argv,
            envp,
            cwd: c_string("the working directory", cwd.as_os_str().as_encoded_bytes())?,
        })
    }
}

/// Opens `/dev/null` on whichever of descriptors 0, 1 and 2 is closed, so that no descriptor
/// the server opens later takes one of those numbers (a child's pipes are moved onto them).
/// Call once at start.
pub fn ensure_standard_fds() -> io::Result<()> {
    for fd in 0..3 {
        // SAFETY: F_GETFD on a descriptor number only reads its flags.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0 {
            continue;
        }
        // SAFETY: a NUL-terminated path; the lowest free number is `fd` (the ones below are open).
        let opened = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        if opened < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The first executable `name` along `path` (a `PATH` value).
pub(super) fn find_program(name: &str, path: &str) -> Option<CString> {
    use std::os::unix::fs::PermissionsExt;
    path.split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| std::path::Path::new(dir).join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
        .and_then(|found| CString::new(found.into_os_string().into_encoded_bytes()).ok())
}

/// Everything the child reads, on the parent's stack for the duration of the clone.
struct ChildArgs<'a> {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    /// What becomes the child's descriptors 0, 1 and 2.
    stdio: [RawFd; 3],
    report: RawFd,
    /// The signal mask to restore just before `execve`.
    mask: libc::sigset_t,
    setup: &'a mut dyn FnMut() -> io::Result<()>,
}

/// A pipe whose both ends close on exec.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned these descriptors to us.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// Starts `command` with its standard streams as `stdio` says; `setup` runs in the child just
/// before `execve`, under the rules of this module. Returns once the child has called
/// `execve`; the caller reaps it.
pub(super) fn spawn(
    command: &Command,
    stdio: Stdio,
    setup: &mut dyn FnMut() -> io::Result<()>,
) -> io::Result<Child> {
    spawn_with(command, stdio, setup, 0)
}

/// As [`spawn`], with more `clone` flags: `CLONE_NEWPID | CLONE_NEWNS` start the init of the
/// commands' namespaces (see `confine::namespaces`).
pub(super) fn spawn_with(
    command: &Command,
    stdio: Stdio,
    setup: &mut dyn FnMut() -> io::Result<()>,
    namespaces: libc::c_int,
) -> io::Result<Child> {
    let (child_stdio, output) = match stdio {
        Stdio::Pipes { stdin } => {
            let (out_read, out_write) = pipe()?;
            let (err_read, err_write) = pipe()?;
            let fds = [stdin, out_write.as_raw_fd(), err_write.as_raw_fd()];
            (fds, Some(((out_read, out_write), (err_read, err_write))))
        }
        Stdio::Terminal { slave } => ([slave; 3], None),
    };
    let (report_read, report_write) = pipe()?;
    let argv = null_terminated(&command.argv);
    let envp = null_terminated(&command.envp);
    let mut stack = vec![0u8; STACK];
    let mut args = ChildArgs {
        program: command.program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: command.cwd.as_ptr(),
        stdio: child_stdio,
        report: report_write.as_raw_fd(),
        // SAFETY: a plain C struct for which all-zero is a valid (empty) set.
        mask: unsafe { std::mem::zeroed() },
        setup,
    };
    let pid = clone_child(&mut stack, &mut args, namespaces)?;
    drop(report_write);
    // The write ends are the child's now.
    let output = output.map(|((out_read, _), (err_read, _))| (out_read, err_read));
    // The child has called execve (closing the report pipe) or written why it could not.
    let mut report = [0u8; 8];
    let read = loop {
        // SAFETY: reads at most `report.len()` bytes into it.
        let read = unsafe { libc::read(report_read.as_raw_fd(), report.as_mut_ptr().cast(), 8) };
        if read >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break read;
        }
    };
    if read == 8 {
        let stage = u32::from_ne_bytes(report[..4].try_into().expect("four bytes")) as usize;
        let errno = i32::from_ne_bytes(report[4..].try_into().expect("four bytes"));
        let cause = io::Error::from_raw_os_error(errno);
        let stage = STAGES.get(stage).copied().unwrap_or("starting");
        return Err(io::Error::new(cause.kind(), format!("{stage}: {cause}")));
    }
    Ok(Child { pid, output })
}

/// Blocks every signal, clones, restores the mask.
fn clone_child(
    stack: &mut [u8],
    args: &mut ChildArgs<'_>,
    namespaces: libc::c_int,
) -> io::Result<u32> {
    // SAFETY: plain C structs for which all-zero is valid; sigfillset fills the set.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe { libc::sigfillset(&mut all) };
    // SAFETY: both sets are valid; the old mask goes to the child to restore, and back here.
    let blocked = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut args.mask) };
    if blocked != 0 {
        return Err(io::Error::from_raw_os_error(blocked));
    }
    // The stack grows down from its (16-byte aligned) end.
    let top = (stack.as_mut_ptr() as usize + stack.len()) & !15;
    // SAFETY: the child runs `child_main` on its own stack with `args`, which outlive it: with
    // CLONE_VFORK this thread is suspended until the child has exec'd or exited.
    let pid = unsafe {
        libc::clone(
            child_main,
            top as *mut c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | namespaces | libc::SIGCHLD,
            (args as *mut ChildArgs<'_>).cast(),
        )
    };
    let cloned = if pid < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(pid as u32)
    };
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &args.mask, std::ptr::null_mut()) };
    cloned
}

/// The child: runs on its own stack in the server's memory until `execve`.
extern "C" fn child_main(arg: *mut c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` that `clone_child` passed, alive while this runs.
    let args = unsafe { &mut *arg.cast::<ChildArgs<'_>>() };
    let (stage, errno) = child_run(args);
    let mut report = [0u8; 8];
    report[..4].copy_from_slice(&stage.to_ne_bytes());
    report[4..].copy_from_slice(&errno.to_ne_bytes());
    // SAFETY: writes our stack buffer to the report pipe, then ends the child.
    unsafe {
        libc::write(args.report, report.as_ptr().cast(), report.len());
        libc::_exit(127)
    }
}

/// Returns only on failure: the stage and the errno.
fn child_run(args: &mut ChildArgs<'_>) -> (u32, i32) {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    };
    reset_signal_handlers();
    for (target, &fd) in args.stdio.iter().enumerate() {
        let target = target as RawFd;
        // SAFETY: descriptor calls on descriptors prepared before the clone.
        let done = unsafe {
            if fd == target {
                // Already in place: it must only survive the exec.
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, target)
            }
        };
        if done < 0 {
            return (0, errno());
        }
    }
    // SAFETY: a NUL-terminated path prepared before the clone.
    if unsafe { libc::chdir(args.cwd) } < 0 {
        return (1, errno());
    }
    if let Err(err) = (args.setup)() {
        return (2, err.raw_os_error().unwrap_or(libc::EINVAL));
    }
    // Entering the commands' mount namespace (in `setup`) moved the working directory to that
    // namespace's root; the same path leads to the same folder there.
    // SAFETY: as above.
    if unsafe { libc::chdir(args.cwd) } < 0 {
        return (1, errno());
    }
    // SAFETY: restores the server's mask (saved before the clone), then replaces this process;
    // every pointer was prepared before the clone and stays valid while the parent waits.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &args.mask, std::ptr::null_mut());
        libc::execve(args.program, args.argv, args.envp);
    }
    (3, errno())
}

/// The kernel's `struct sigaction` (glibc's differs, and its wrapper refuses the signals glibc
/// reserves for itself).
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// Every signal goes back to its default disposition in the child: the server's handlers are
/// the server's code, and a signal ignored by whoever started the server (SIGPIPE by the Rust
/// runtime, SIGHUP by `nohup`) is no business of a command's.
fn reset_signal_handlers() {
    for signal in 1..=64 {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        let default = KernelSigaction {
            handler: libc::SIG_DFL,
            flags: 0,
            restorer: 0,
            mask: 0,
        };
        // SAFETY: rt_sigaction with a valid kernel struct and the kernel's mask size; this
        // child has its own copy of the handler table (no CLONE_SIGHAND).
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                &default as *const KernelSigaction,
                std::ptr::null_mut::<KernelSigaction>(),
                8usize,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn sh(script: &str, env: &[(&str, &str)]) -> Command {
        let sh = find_program("sh", "/usr/bin:/bin").expect("sh");
        Command::new(&sh, &["-c", script], env.iter().copied(), Path::new("/")).unwrap()
    }

    use std::path::Path;

    fn run(
        command: &Command,
        setup: &mut dyn FnMut() -> io::Result<()>,
    ) -> io::Result<(String, i32)> {
        let stdin = std::fs::File::open("/dev/null")?;
        let stdio = Stdio::Pipes {
            stdin: stdin.as_raw_fd(),
        };
        let child = spawn(command, stdio, setup)?;
        let (stdout, _) = child.output.expect("pipes");
        let mut out = String::new();
        std::fs::File::from(stdout).read_to_string(&mut out)?;
        let mut status = 0;
        // SAFETY: waits for the child just started.
        unsafe { libc::waitpid(child.pid as i32, &mut status, 0) };
        Ok((out, libc::WEXITSTATUS(status)))
    }

    #[test]
    fn runs_the_program_with_its_arguments_environment_and_directory() {
        let command = sh(
            "echo \"$GREETING from $(pwd)\"; exit 3",
            &[("GREETING", "hello")],
        );
        let (out, code) = run(&command, &mut || Ok(())).unwrap();
        assert_eq!(out, "hello from /\n");
        assert_eq!(code, 3);
    }

    #[test]
    fn the_child_has_no_handler_no_ignored_signal_and_no_blocked_signal() {
        // The test binary ignores SIGPIPE (Rust's runtime) and handles others.
        let cat = find_program("cat", "/usr/bin:/bin").expect("cat");
        let command = Command::new(&cat, &["/proc/self/status"], [], Path::new("/")).unwrap();
        let (out, _) = run(&command, &mut || Ok(())).unwrap();
        let masks: Vec<&str> = out
            .lines()
            .filter(|line| {
                ["SigBlk:", "SigIgn:", "SigCgt:"]
                    .iter()
                    .any(|m| line.starts_with(m))
            })
            .collect();
        assert_eq!(masks.len(), 3, "{out}");
        for line in masks {
            assert!(line.ends_with("0000000000000000"), "{line}");
        }
    }

    #[test]
    fn a_failure_names_its_stage_and_cause() {
        let missing = Command::new(c"/nonexistent/bash", &[], [], Path::new("/")).unwrap();
        let err = run(&missing, &mut || Ok(())).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(
            err.to_string().starts_with("executing the program: "),
            "{err}"
        );

        let refused = sh("true", &[]);
        let err = run(&refused, &mut || {
            Err(io::Error::from_raw_os_error(libc::EPERM))
        })
        .unwrap_err();
        assert!(
            err.to_string().starts_with("confining the command: "),
            "{err}"
        );

        let nowhere = Command::new(c"/bin/sh", &[], [], Path::new("/nonexistent")).unwrap();
        let err = run(&nowhere, &mut || Ok(())).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("entering the working directory: "),
            "{err}"
        );
    }

    #[test]
    fn a_nul_byte_is_refused_before_anything_starts() {
        let err = Command::new(c"/bin/sh", &["-c", "a\0b"], [], Path::new("/")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
