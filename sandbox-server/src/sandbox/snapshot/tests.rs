use std::os::fd::AsFd;

use super::*;

#[test]
fn diff_names_every_kind_of_change() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let blobs = BlobStore::new(store_dir.path(), 1 << 20).unwrap();
    let root = dir.path();
    std::fs::write(root.join("same.txt"), "same").unwrap();
    std::fs::write(root.join("edit.txt"), "old").unwrap();
    std::fs::write(root.join("gone.txt"), "bye").unwrap();
    std::fs::write(root.join("mode.sh"), "#!/bin/sh").unwrap();
    std::fs::create_dir(root.join(".git")).unwrap();
    std::fs::create_dir(root.join(".git/objects")).unwrap();
    std::fs::write(root.join(".git/objects/x"), "blob").unwrap();
    let ignore = IgnoreList::new(&[".git/objects".to_owned()]);
    let open = || std::fs::File::open(root).unwrap();
    let scanned = scan(open().as_fd(), &ignore, None, &blobs, u64::MAX).unwrap();
    let (before, hashed) = (scanned.manifest, scanned.n_hashed);
    assert_eq!(hashed, 4);
    assert!(
        !before.contains_key(b".git/objects/x".as_slice())
            && before.contains_key(b".git".as_slice())
    );

    std::fs::write(root.join("edit.txt"), "new!").unwrap();
    std::fs::remove_file(root.join("gone.txt")).unwrap();
    std::fs::write(root.join("new.txt"), "hi").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root.join("mode.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let scanned = scan(open().as_fd(), &ignore, Some(&before), &blobs, u64::MAX).unwrap();
    let (after, hashed) = (scanned.manifest, scanned.n_hashed);
    let changes: Vec<(String, ChangeKind)> = diff(&before, &after)
        .into_iter()
        .map(|c| (c.path, c.change))
        .collect();
    let expected = [
        ("edit.txt", ChangeKind::Modified),
        ("gone.txt", ChangeKind::Deleted),
        ("mode.sh", ChangeKind::ModeChanged),
        ("new.txt", ChangeKind::Added),
    ];
    assert_eq!(changes, expected.map(|(p, c)| (p.to_owned(), c)).to_vec());
    assert_eq!(
        hashed, 3,
        "edit.txt, new.txt and mode.sh (its ctime changed); same.txt reused"
    );
    let old = before[b"edit.txt".as_slice()]
        .version
        .sha256
        .clone()
        .unwrap();
    assert_eq!(
        std::fs::read(blobs.path(&old).unwrap()).unwrap(),
        b"old",
        "the before version is kept"
    );
}

#[test]
fn sparse_files_over_the_blob_limit_are_not_read_and_still_change() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let blobs = BlobStore::new(store_dir.path(), 4).unwrap();
    let big = dir.path().join("big");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    std::fs::write(dir.path().join("dense"), "12345678").unwrap();
    std::fs::write(dir.path().join("small"), "1234").unwrap();
    let ignore = IgnoreList::default();
    let open = || std::fs::File::open(dir.path()).unwrap();
    let before = scan(open().as_fd(), &ignore, None, &blobs, u64::MAX).unwrap();
    assert_eq!(
        before.n_hashed, 2,
        "the sparse file over the limit is not read"
    );
    let version = &before.manifest[b"big".as_slice()].version;
    assert_eq!(version.size, 1 << 20);
    // A file over the limit that holds its bytes on disk is read and hashed (not kept).
    let dense = &before.manifest[b"dense".as_slice()].version;
    use sha2::Digest as _;
    let expected = hex::encode(sha2::Sha256::digest(b"12345678"));
    assert_eq!(dense.sha256.as_deref(), Some(expected.as_str()));
    let stand_in = version.sha256.clone().unwrap();
    assert!(blobs.path(&stand_in).is_none(), "not kept");
    // The same size, another mtime: a change, though the content was never read.
    let file = std::fs::File::options().write(true).open(&big).unwrap();
    file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1000))
        .unwrap();
    let after = scan(
        open().as_fd(),
        &ignore,
        Some(&before.manifest),
        &blobs,
        u64::MAX,
    )
    .unwrap();
    let changes: Vec<(String, ChangeKind)> = diff(&before.manifest, &after.manifest)
        .into_iter()
        .map(|c| (c.path, c.change))
        .collect();
    assert_eq!(changes, [("big".to_owned(), ChangeKind::Modified)]);
}

/// A workspace of more paths than `--scan-max-entries` allows is refused, naming the limit and
/// the flag, and records nothing; as many as it allows is a snapshot like any other.
#[test]
fn a_workspace_past_the_scan_limit_is_refused_and_records_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let blobs = BlobStore::new(store_dir.path(), 1 << 20).unwrap();
    for i in 0..5 {
        std::fs::write(dir.path().join(format!("f{i}")), "x").unwrap();
    }
    let snapshots = Snapshots::default();
    let ignore = IgnoreList::default();
    let root = std::fs::File::open(dir.path()).unwrap();
    let taken = snapshots
        .take(root.as_fd(), &ignore, &blobs, None, 5)
        .unwrap();
    assert_eq!(taken.manifest.len(), 5);
    for i in 5..10 {
        std::fs::write(dir.path().join(format!("f{i}")), "x").unwrap();
    }
    let err = snapshots
        .take(root.as_fd(), &ignore, &blobs, Some(taken.id.as_str()), 5)
        .unwrap_err();
    assert!(matches!(err, SnapshotError::TooManyPaths(_)), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("more than 5 paths (--scan-max-entries)")
            && message.contains("stopped at path 6"),
        "{message}"
    );
    assert!(snapshots.get("snap_2").is_none(), "nothing was recorded");
    assert!(snapshots.get(&taken.id).is_some());
}

/// The kept manifests hold at most their budget of paths together: past it the oldest are
/// dropped (a `since` naming one is then unknown), and the newest is kept whatever its size.
#[test]
fn kept_snapshots_stay_within_their_budget_of_paths() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let blobs = BlobStore::new(store_dir.path(), 1 << 20).unwrap();
    for i in 0..4 {
        std::fs::write(dir.path().join(format!("f{i}")), "x").unwrap();
    }
    let snapshots = Snapshots::keeping(10);
    let ignore = IgnoreList::default();
    let root = std::fs::File::open(dir.path()).unwrap();
    let take = |since: Option<&str>| {
        snapshots
            .take(root.as_fd(), &ignore, &blobs, since, u64::MAX)
            .unwrap()
            .id
    };
    let first = take(None);
    let second = take(None);
    assert_eq!(take(Some(&first)).as_str(), "snap_3", "8 paths fit in 10");
    assert!(
        snapshots.get(&first).is_none(),
        "12 paths did not: the oldest went"
    );
    assert!(snapshots.get(&second).is_some() && snapshots.get("snap_3").is_some());
    let err = snapshots
        .take(root.as_fd(), &ignore, &blobs, Some(&first), u64::MAX)
        .unwrap_err();
    assert!(err.to_string().contains("no longer kept"), "{err}");
    for i in 4..20 {
        std::fs::write(dir.path().join(format!("f{i}")), "x").unwrap();
    }
    let big = snapshots
        .take(root.as_fd(), &ignore, &blobs, None, u64::MAX)
        .unwrap();
    assert_eq!(big.manifest.len(), 20);
    assert!(
        snapshots.get(&big.id).is_some(),
        "the newest stays, over budget alone"
    );
    assert!(snapshots.get("snap_3").is_none() && snapshots.get(&second).is_none());
}
