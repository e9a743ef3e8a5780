//! The mount calls the init makes: the new mount API (detached copies of a tree, their
//! attributes, moved into place), for which nix has no wrapper yet, and `mount(2)`.

#![allow(unsafe_code)] // mount API system calls without a wrapper

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::libc;

// The new mount API (include/uapi/linux/mount.h).
const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
pub(super) const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
pub(super) const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
pub(super) const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// A detached copy of the mounts at and below `path`, with `attributes` set on each, and
/// idmapped through `userns` when given.
pub(super) fn copy_tree(
    path: &Path,
    attributes: u64,
    userns: Option<&OwnedFd>,
) -> std::io::Result<OwnedFd> {
    let c_path = c_path(path)?;
    // SAFETY: a NUL-terminated path; the flags are the documented ones. Recursive: in a user
    // namespace a tree with locked mounts below it can only be copied whole.
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
    if let Some(userns) = userns {
        // The idmapping first, on its own: it must be set where no other attribute changes.
        set_attributes(&tree, MOUNT_ATTR_IDMAP, Some(userns))?;
    }
    set_attributes(&tree, attributes, None)?;
    Ok(tree)
}

fn set_attributes(
    tree: &OwnedFd,
    attributes: u64,
    userns: Option<&OwnedFd>,
) -> std::io::Result<()> {
    let attr = MountAttr {
        attr_set: attributes,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.map_or(0, |fd| fd.as_raw_fd() as u64),
    };
    // SAFETY: a valid attribute struct of the size passed, on a descriptor of ours.
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
    Ok(())
}

/// Moves a detached tree onto `path`.
pub(super) fn attach(tree: &OwnedFd, path: &Path) -> std::io::Result<()> {
    let c_path = c_path(path)?;
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

pub(super) fn open_path(path: &Path) -> std::io::Result<OwnedFd> {
    let c_path = c_path(path)?;
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: just opened.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(super) fn c_path(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL in a path"))
}

pub(super) fn mount(
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
