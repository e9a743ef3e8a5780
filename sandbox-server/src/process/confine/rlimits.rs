//! Resource limits per command (`setrlimit` in the child).

#![allow(unsafe_code)] // setrlimit between the clone and the exec

use nix::libc;
use sandbox_protocol::{Protection, ProtectionName};

use super::{check, protection, show, show_bytes};

/// Resource limits per command; 0 means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rlimits {
    pub cpu_secs: u64,
    pub memory_bytes: u64,
    pub file_size_bytes: u64,
    pub processes: u64,
    pub open_files: u64,
}

pub fn describe(limits: Rlimits) -> Protection {
    let detail = format!(
        "cpu {} s, memory {}, file size {}, processes {}, open files {}",
        show(limits.cpu_secs),
        show_bytes(limits.memory_bytes),
        show_bytes(limits.file_size_bytes),
        show(limits.processes),
        show(limits.open_files)
    );
    protection(ProtectionName::ResourceLimits, true, detail)
}

/// In the child: sets every limit that is not 0.
pub fn apply_in_child(limits: Rlimits) -> std::io::Result<()> {
    let set = |resource, value: u64| {
        if value == 0 {
            return Ok(());
        }
        let limit = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: setrlimit reads the struct on our stack; async-signal-safe.
        check(unsafe { libc::setrlimit(resource, &limit) })
    };
    set(libc::RLIMIT_CPU, limits.cpu_secs)?;
    set(libc::RLIMIT_AS, limits.memory_bytes)?;
    set(libc::RLIMIT_FSIZE, limits.file_size_bytes)?;
    set(libc::RLIMIT_NPROC, limits.processes)?;
    set(libc::RLIMIT_NOFILE, limits.open_files)
}
