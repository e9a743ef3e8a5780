//! Side effects that tool results do not show: listening sockets and watched paths outside the
//! workspace, with the processes the supervisor knows: the state fingerprint.

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::Path;
use std::sync::OnceLock;

use nix::fcntl::OFlag;
use nix::sys::stat::{Mode, SFlag, fstat};
use sandbox_protocol::{
    FingerprintResponse, ListeningSocket, SocketProtocol, WatchedKind, WatchedPath,
};

use crate::process::Supervisor;

mod diag;

/// The processes the server started, the listening sockets (with the server's own and its
/// processes' named), and the hashes of the watched paths. Blocking: reads `/proc` and files.
pub fn take(supervisor: &Supervisor, watch: &[String]) -> FingerprintResponse {
    let processes = supervisor.process_infos();
    let mut pids = supervisor.live_host_pids();
    let server = std::process::id();
    pids.push(server);
    // Owners as commands see them (the server's own socket keeps the server's pid).
    let owners = socket_owners(&pids)
        .into_iter()
        .map(|(inode, pid)| {
            let public = if pid == server {
                pid
            } else {
                supervisor.public_pid(pid)
            };
            (inode, public)
        })
        .collect();
    FingerprintResponse {
        processes,
        listening: listening_sockets(&owners),
        watched: watched(watch),
    }
}
use sha2::{Digest, Sha256};

/// TCP sockets in LISTEN state; `owners` maps socket inodes to the pids of the server's
/// processes that hold them. Asked of the kernel through `sock_diag` netlink, which walks only
/// the listening sockets (~0.1 ms); `/proc/net/tcp*` walks every socket of the network
/// namespace on each read (2.4 ms a read here), and is the fallback.
pub fn listening_sockets(owners: &HashMap<u64, u32>) -> Vec<ListeningSocket> {
    let mut sockets = match diag::listening() {
        Ok(found) => found
            .into_iter()
            .map(|(protocol, address, port, inode)| ListeningSocket {
                protocol,
                address,
                port,
                pid: owners.get(&inode).copied(),
            })
            .collect(),
        Err(err) => {
            tracing::debug!(cause = %err, "sock_diag failed; reading /proc/net/tcp");
            proc_listening(owners)
        }
    };
    sockets.sort_by(|a, b| (a.port, &a.address).cmp(&(b.port, &b.address)));
    sockets
}

/// The same from `/proc/net/tcp` and `/proc/net/tcp6`, each read with one large buffer (every
/// read walks the whole socket table).
fn proc_listening(owners: &HashMap<u64, u32>) -> Vec<ListeningSocket> {
    let mut sockets = Vec::new();
    for (protocol, file) in [
        (SocketProtocol::Tcp, "/proc/net/tcp"),
        (SocketProtocol::Tcp6, "/proc/net/tcp6"),
    ] {
        let mut text = String::with_capacity(1 << 20);
        if fs::File::open(file)
            .and_then(|mut f| f.read_to_string(&mut text))
            .is_err()
        {
            continue;
        }
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address, rem_address, st (0A is LISTEN), ..., inode is field 9.
            if fields.len() < 10 || fields[3] != "0A" {
                continue;
            }
            let Some((address_hex, port_hex)) = fields[1].split_once(':') else {
                continue;
            };
            let Ok(port) = u16::from_str_radix(port_hex, 16) else {
                continue;
            };
            let inode: u64 = fields[9].parse().unwrap_or(0);
            sockets.push(ListeningSocket {
                protocol,
                address: decode_address(address_hex),
                port,
                pid: owners.get(&inode).copied(),
            });
        }
    }
    sockets
}

/// The socket inodes held by `pids`.
pub fn socket_owners(pids: &[u32]) -> HashMap<u64, u32> {
    let mut owners = HashMap::new();
    for &pid in pids {
        let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(target) = fs::read_link(fd.path()) {
                let target = target.to_string_lossy();
                if let Some(inode) = target
                    .strip_prefix("socket:[")
                    .and_then(|s| s.strip_suffix(']'))
                    && let Ok(inode) = inode.parse()
                {
                    owners.insert(inode, pid);
                }
            }
        }
    }
    owners
}

/// `/proc/net/tcp` addresses are little-endian hex words.
fn decode_address(hex: &str) -> String {
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect();
    match bytes.len() {
        4 => format!("{}.{}.{}.{}", bytes[3], bytes[2], bytes[1], bytes[0]),
        16 => {
            let words: Vec<String> = bytes
                .chunks(4)
                .flat_map(|word| {
                    let b = [word[3], word[2], word[1], word[0]];
                    [
                        format!("{:x}", u16::from_be_bytes([b[0], b[1]])),
                        format!("{:x}", u16::from_be_bytes([b[2], b[3]])),
                    ]
                })
                .collect();
            std::net::Ipv6Addr::from(
                <[u16; 8]>::try_from(
                    words
                        .iter()
                        .map(|w| u16::from_str_radix(w, 16).unwrap_or(0))
                        .collect::<Vec<_>>(),
                )
                .unwrap_or([0; 8]),
            )
            .to_string()
        }
        _ => hex.to_owned(),
    }
}

/// The hash of what is at each watched path (a folder by its sorted listing, bounded).
pub fn watched(paths: &[String]) -> Vec<WatchedPath> {
    paths
        .iter()
        .map(|path| {
            let mut names_left = MAX_NAMES;
            let (kind, sha256) = hash_path(Path::new(path), 0, &mut names_left);
            WatchedPath {
                path: path.clone(),
                kind,
                sha256,
            }
        })
        .collect()
}

/// Folders deeper than this are hashed by their names only.
const MAX_DEPTH: usize = 8;

/// Names the folders of one watched path may list in all, so that watching a huge tree costs
/// bounded memory at every fingerprint: a folder of more names than are left is hashed by its
/// number of names alone (counted, never held), and so is every later non-empty folder once
/// none are left. Folders are listed sorted, so the same tree always gives the same hash.
const MAX_NAMES: usize = 100_000;

fn hash_path(path: &Path, depth: usize, names_left: &mut usize) -> (WatchedKind, Option<String>) {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return (WatchedKind::Missing, None);
    };
    let file_type = meta.file_type();
    if file_type.is_symlink() {
        let target = fs::read_link(path)
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_default();
        return (
            WatchedKind::Symlink,
            Some(hex::encode(Sha256::digest(target.as_bytes()))),
        );
    }
    if file_type.is_file() {
        return hash_file(path);
    }
    if file_type.is_dir() {
        return (WatchedKind::Dir, hash_dir(path, depth, names_left));
    }
    (WatchedKind::Other, None)
}

/// A folder's hash: its sorted names, each with its own hash (see [`MAX_NAMES`]).
fn hash_dir(path: &Path, depth: usize, names_left: &mut usize) -> Option<String> {
    let entries = fs::read_dir(path).ok()?;
    let mut names = Vec::new();
    let mut count = 0usize;
    for entry in entries.flatten() {
        count += 1;
        if count <= *names_left {
            names.push(entry.file_name());
        }
    }
    if count > *names_left {
        let stand_in = format!("a folder of {count} names, not listed");
        return Some(hex::encode(Sha256::digest(stand_in.as_bytes())));
    }
    *names_left -= count;
    names.sort();
    let mut hasher = Sha256::new();
    for name in names {
        let child = if depth < MAX_DEPTH {
            hash_path(&path.join(&name), depth + 1, names_left)
                .1
                .unwrap_or_default()
        } else {
            String::new()
        };
        hasher.update(name.as_encoded_bytes());
        hasher.update([0]);
        hasher.update(child.as_bytes());
        hasher.update([b'\n']);
    }
    Some(hex::encode(hasher.finalize()))
}

/// Sparse watched files larger than this stand for their stat (size, times, inode), unread: a
/// watched path is outside the workspace but a command may write it, and a sparse file of
/// terabytes would otherwise be read at every fingerprint. (A dense one is read: its bytes are
/// bounded by the disk, and its hash is the same in every run.)
const MAX_READ_BYTES: u64 = 16 * 1024 * 1024;

/// The hash of the regular file at `path`. Opened without following a symlink and without
/// blocking (the path was a file when looked at, but a command may have swapped it for a FIFO,
/// whose open would wait for a writer forever), then `fstat`ed: only a regular file is read,
/// and only as far as its size then.
fn hash_file(path: &Path) -> (WatchedKind, Option<String>) {
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_CLOEXEC
        | OFlag::O_NOCTTY;
    let Ok(fd) = nix::fcntl::open(path, flags, Mode::empty()) else {
        return (WatchedKind::File, None);
    };
    let Ok(stat) = fstat(&fd) else {
        return (WatchedKind::File, None);
    };
    if SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return (WatchedKind::Other, None);
    }
    let size = stat.st_size as u64;
    let mut hasher = Sha256::new();
    let on_disk = u64::try_from(stat.st_blocks)
        .unwrap_or(0)
        .saturating_mul(512);
    if size > MAX_READ_BYTES && on_disk < size {
        // Salted, so no content a command writes can hash to it (and hide a change).
        static SALT: OnceLock<[u8; 32]> = OnceLock::new();
        hasher.update(b"a file too large to read, by its stat\0");
        hasher.update(SALT.get_or_init(rand::random));
        for field in [
            stat.st_mtime,
            stat.st_mtime_nsec,
            stat.st_ctime,
            stat.st_ctime_nsec,
        ] {
            hasher.update(field.to_le_bytes());
        }
        hasher.update(size.to_le_bytes());
        hasher.update(stat.st_ino.to_le_bytes());
        return (WatchedKind::File, Some(hex::encode(hasher.finalize())));
    }
    let mut file = fs::File::from(fd).take(size);
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => hasher.update(&buffer[..n]),
            Err(_) => return (WatchedKind::File, None),
        }
    }
    (WatchedKind::File, Some(hex::encode(hasher.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_decode() {
        assert_eq!(decode_address("0100007F"), "127.0.0.1");
        assert_eq!(decode_address("00000000000000000000000001000000"), "::1");
    }

    #[test]
    fn a_watched_tree_lists_a_bounded_number_of_names() {
        let dir = tempfile::tempdir().unwrap();
        let (small, big) = (dir.path().join("small"), dir.path().join("big"));
        std::fs::create_dir_all(&small).unwrap();
        std::fs::create_dir_all(big.join("inner")).unwrap();
        for i in 0..MAX_NAMES {
            std::fs::write(big.join(format!("{i}")), "").unwrap();
        }
        std::fs::write(big.join("inner/f"), "a").unwrap();
        let paths = vec![big.display().to_string()];
        let first = watched(&paths);
        assert_eq!(first[0].kind, WatchedKind::Dir);
        std::fs::write(big.join("inner/f"), "b").unwrap();
        assert_eq!(
            watched(&paths)[0].sha256,
            first[0].sha256,
            "past the names a watch lists, a folder stands for its number of names"
        );
        std::fs::write(big.join("one-more"), "").unwrap();
        assert_ne!(
            watched(&paths)[0].sha256,
            first[0].sha256,
            "its count is hashed"
        );
        std::fs::write(small.join("f"), "a").unwrap();
        let small_paths = vec![small.display().to_string()];
        let before = watched(&small_paths);
        std::fs::write(small.join("f"), "b").unwrap();
        assert_ne!(
            watched(&small_paths)[0].sha256,
            before[0].sha256,
            "a small folder is still hashed by content"
        );
    }

    #[test]
    fn watched_paths_change_with_their_content() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("profile");
        let paths = vec![file.display().to_string(), dir.path().display().to_string()];
        assert_eq!(watched(&paths)[0].kind, WatchedKind::Missing);
        std::fs::write(&file, "a").unwrap();
        let first = watched(&paths);
        std::fs::write(&file, "b").unwrap();
        let second = watched(&paths);
        assert_eq!(first[0].kind, WatchedKind::File);
        assert_ne!(first[0].sha256, second[0].sha256);
        assert_ne!(
            first[1].sha256, second[1].sha256,
            "the folder's hash follows its contents"
        );
    }
}
