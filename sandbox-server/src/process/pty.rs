//! Pseudo-terminals for `tty` processes: the master end, read and written without blocking
//! the runtime, resized, and asked for the terminal's foreground process group.

// ioctl on the master descriptor has no safe wrapper in nix.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::libc;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// The master end of a terminal.
#[derive(Debug)]
pub struct Master {
    fd: AsyncFd<OwnedFd>,
}

fn winsize(rows: u16, cols: u16) -> libc::winsize {
    libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

/// A new terminal of `rows` × `cols`: its master (non-blocking, close-on-exec) and its slave
/// end for the child. Call inside the runtime.
pub fn open(rows: u16, cols: u16) -> io::Result<(Master, OwnedFd)> {
    let size = winsize(rows, cols);
    let pair = nix::pty::openpty(Some(&size), None).map_err(io::Error::from)?;
    for fd in [&pair.master, &pair.slave] {
        nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )
        .map_err(io::Error::from)?;
    }
    let flags =
        nix::fcntl::fcntl(&pair.master, nix::fcntl::FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&pair.master, nix::fcntl::FcntlArg::F_SETFL(flags))
        .map_err(io::Error::from)?;
    // SAFETY: the master is owned by the `AsyncFd` and closed only when it is dropped, which
    // deregisters it first.
    let fd = unsafe {
        AsyncFd::register_with_interest(pair.master, Interest::READABLE | Interest::WRITABLE)
    }
    .map_err(|err| err.into_parts().1)?;
    Ok((Master { fd }, pair.slave))
}

impl Master {
    /// Reads what the terminal's programs printed; 0 once every slave end is closed (the
    /// kernel says EIO then).
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut ready = self.fd.readable().await?;
            match ready.try_io(|fd| nix::unistd::read(fd.get_ref(), buf).map_err(io::Error::from)) {
                Ok(Err(err)) if err.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// Writes all of `bytes` as typed input.
    pub async fn write_all(&self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let mut ready = self.fd.writable().await?;
            match ready
                .try_io(|fd| nix::unistd::write(fd.get_ref(), bytes).map_err(io::Error::from))
            {
                Ok(Ok(n)) => bytes = &bytes[n..],
                Ok(Err(err)) => return Err(err),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Sets the terminal's size; its foreground programs get SIGWINCH.
    pub fn resize(&self, rows: u16, cols: u16) -> io::Result<()> {
        let size = winsize(rows, cols);
        // SAFETY: TIOCSWINSZ reads a `winsize` from the pointer, which outlives the call.
        let done = unsafe { libc::ioctl(self.fd.get_ref().as_raw_fd(), libc::TIOCSWINSZ, &size) };
        if done < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The terminal's foreground process group (what Ctrl-C reaches).
    pub fn foreground_group(&self) -> Option<i32> {
        nix::unistd::tcgetpgrp(self.fd.get_ref())
            .ok()
            .map(nix::unistd::Pid::as_raw)
            .filter(|&pgid| pgid > 0)
    }
}
