use std::os::fd::AsFd;

use super::*;

const CAPS: Caps = Caps {
    max_entries: 1000,
    max_bytes: 1 << 20,
};

fn replace(dir: &Path, body: impl Read, caps: Caps) -> Result<Unpacked, ArchiveError> {
    let root = File::open(dir).unwrap();
    replace_from_tar(root.as_fd(), body, caps)
}

fn tar_of(dir: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    let root = File::open(dir).unwrap();
    write_tar(root.as_fd(), &mut bytes, u64::MAX).unwrap();
    bytes
}

#[test]
fn an_archive_round_trips_and_a_bad_one_changes_nothing() {
    let source = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(source.path().join("a/b")).unwrap();
    std::fs::write(source.path().join("a/b/c.txt"), "deep").unwrap();
    std::os::unix::fs::symlink("a/b/c.txt", source.path().join("link")).unwrap();
    let tar_bytes = tar_of(source.path());

    let target = tempfile::tempdir().unwrap();
    std::fs::write(target.path().join("old.txt"), "old").unwrap();
    let unpacked = replace(target.path(), tar_bytes.as_slice(), CAPS).unwrap();
    assert_eq!(
        unpacked,
        Unpacked {
            n_files: 1,
            n_bytes: 4
        }
    );
    assert!(!target.path().join("old.txt").exists());
    assert_eq!(
        std::fs::read_to_string(target.path().join("link")).unwrap(),
        "deep"
    );
    assert!(
        std::fs::symlink_metadata(target.path().join("link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );

    for bad in [b"this is not a tar archive at all".as_slice(), b""] {
        let err = replace(target.path(), bad, CAPS).unwrap_err();
        assert!(matches!(err, ArchiveError::Invalid(_)), "{err}");
    }
    assert_eq!(
        std::fs::read_to_string(target.path().join("a/b/c.txt")).unwrap(),
        "deep",
        "untouched"
    );
    let names: Vec<_> = std::fs::read_dir(target.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "no staging folder left: {names:?}");
}

#[test]
fn caps_stop_an_archive_before_it_fills_the_disk() {
    let source = tempfile::tempdir().unwrap();
    std::fs::write(source.path().join("big"), vec![0u8; 2 << 20]).unwrap();
    let bytes = tar_of(source.path());
    let target = tempfile::tempdir().unwrap();
    std::fs::write(target.path().join("keep.txt"), "kept").unwrap();
    let err = replace(target.path(), bytes.as_slice(), CAPS).unwrap_err();
    assert!(err.to_string().contains("--archive-max-bytes"), "{err}");
    let few = Caps {
        max_entries: 1,
        max_bytes: 1 << 30,
    };
    std::fs::create_dir(source.path().join("d")).unwrap();
    let err = replace(target.path(), tar_of(source.path()).as_slice(), few).unwrap_err();
    assert!(err.to_string().contains("--archive-max-entries"), "{err}");
    assert_eq!(
        std::fs::read_dir(target.path()).unwrap().count(),
        1,
        "only keep.txt"
    );
}

/// A tar of `entries`: (path, symlink target or file content, is a symlink).
fn tar_with(entries: &[(&str, &str, bool)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, data, link) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        if *link {
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_size(0);
            builder.append_link(&mut header, path, data).unwrap();
        } else {
            header.set_size(data.len() as u64);
            builder
                .append_data(&mut header, path, data.as_bytes())
                .unwrap();
        }
    }
    builder.into_inner().unwrap()
}

#[test]
fn an_entry_through_a_symlink_is_refused_and_writes_nothing_there() {
    let outside = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir().unwrap();
    std::fs::write(target.path().join("keep.txt"), "kept").unwrap();
    let to = outside.path().to_str().unwrap();
    let bytes = tar_with(&[("link", to, true), ("link/evil", "x", false)]);
    let err = replace(target.path(), bytes.as_slice(), CAPS).unwrap_err();
    assert!(
        err.to_string().contains("leads outside the workspace"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(target.path()).unwrap().count(), 1);
}

/// What a command running alongside a restore can do: swap the staging folder for a
/// symlink to a folder outside, once the unpacking has begun.
struct SwapsStaging<'a> {
    root: &'a Path,
    outside: &'a Path,
    body: &'a [u8],
}

impl Read for SwapsStaging<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        for entry in std::fs::read_dir(self.root)? {
            let path = entry?.path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.starts_with(STAGING_PREFIX) && !path.is_symlink() {
                std::fs::rename(&path, self.root.join("moved"))?;
                std::os::unix::fs::symlink(self.outside, &path)?;
            }
        }
        let n = self.body.len().min(buf.len()).min(512);
        buf[..n].copy_from_slice(&self.body[..n]);
        self.body = &self.body[n..];
        Ok(n)
    }
}

#[test]
fn a_staging_folder_swapped_for_a_symlink_leads_nothing_outside() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("precious"), "mine").unwrap();
    let target = tempfile::tempdir().unwrap();
    let bytes = tar_with(&[("cron.d/job", "* * * * * root evil", false)]);
    let body = SwapsStaging {
        root: target.path(),
        outside: outside.path(),
        body: &bytes,
    };
    // Whether the restore then fails or not, nothing was written, moved or taken outside.
    let _ = replace(target.path(), body, CAPS);
    let names: Vec<_> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names, ["precious"]);
}

/// An archive as `tar -C dir -cf - .` makes it: a first entry `./`, names under `./`, a
/// hard link, and a set-user-id mode, which a restore does not keep.
#[test]
fn a_tar_of_dot_with_a_hard_link_restores() {
    let mut builder = tar::Builder::new(Vec::new());
    let mut entry = |name: &str, kind: tar::EntryType, data: &[u8], mode: u32| {
        let mut header = tar::Header::new_gnu();
        header.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(data.len() as u64);
        if kind == tar::EntryType::Link {
            header.set_link_name("./d/a.txt").unwrap();
        }
        header.set_cksum();
        builder.append(&header, data).unwrap();
    };
    entry("./", tar::EntryType::Directory, b"", 0o755);
    entry("./d/", tar::EntryType::Directory, b"", 0o555);
    entry("./d/a.txt", tar::EntryType::Regular, b"a\n", 0o4755);
    entry("./b.txt", tar::EntryType::Link, b"", 0o644);
    let bytes = builder.into_inner().unwrap();
    let target = tempfile::tempdir().unwrap();
    let unpacked = replace(target.path(), bytes.as_slice(), CAPS).unwrap();
    assert_eq!(unpacked.n_files, 1);
    let a = std::fs::metadata(target.path().join("d/a.txt")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&a.permissions()) & 0o7777,
        0o755
    );
    let b = std::fs::metadata(target.path().join("b.txt")).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::ino(&b),
        std::os::unix::fs::MetadataExt::ino(&a)
    );
    let d = std::fs::metadata(target.path().join("d")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&d.permissions()) & 0o777,
        0o555
    );
}

#[test]
fn sockets_and_fifos_are_left_out_of_the_archive() {
    let source = tempfile::tempdir().unwrap();
    std::fs::write(source.path().join("f"), "x").unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(source.path().join("sock")).unwrap();
    nix::unistd::mkfifo(
        &source.path().join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let mut bytes = Vec::new();
    let root = File::open(source.path()).unwrap();
    let skipped = write_tar(root.as_fd(), &mut bytes, u64::MAX).unwrap();
    let names: Vec<String> = skipped
        .iter()
        .map(|s| String::from_utf8_lossy(&s.path).into_owned())
        .collect();
    assert_eq!(names, ["fifo", "sock"]);
    let mut archive = tar::Archive::new(bytes.as_slice());
    let paths: Vec<String> = archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .collect();
    assert_eq!(paths, ["f"]);
}

#[test]
fn an_archive_of_more_paths_than_the_scan_limit_stops() {
    let source = tempfile::tempdir().unwrap();
    for i in 0..10 {
        std::fs::write(source.path().join(format!("f{i}")), "x").unwrap();
    }
    let root = File::open(source.path()).unwrap();
    let err = write_tar(root.as_fd(), io::sink(), 5).unwrap_err();
    let stopped = walk::TooManyPaths::of(&err).expect("the scan limit");
    assert_eq!((stopped.limit, stopped.reached), (5, 6));
    assert!(err.to_string().contains("--scan-max-entries"), "{err}");
    assert!(write_tar(root.as_fd(), io::sink(), 10).unwrap().is_empty());
}
