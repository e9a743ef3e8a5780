use super::*;

fn capture_all(chunks: &[&[u8]], limit: usize, cap: u64) -> CapturedStream {
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::new(dir.path(), cap, u64::MAX).unwrap();
    let mut capture = store.capture(limit);
    for chunk in chunks {
        capture.push(chunk);
    }
    let captured = capture.finish(&store);
    let stored = match store.lookup(&captured.artifact.id).unwrap() {
        StoredArtifact::File(path) => fs::read(path).unwrap(),
        StoredArtifact::Memory(bytes) => bytes.to_vec(),
        StoredArtifact::Empty => Vec::new(),
    };
    assert_eq!(stored.len() as u64, captured.artifact.size);
    assert_eq!(
        hex::encode(Sha256::digest(&stored)),
        captured.artifact.sha256
    );
    captured
}

#[test]
fn short_output_is_kept_whole() {
    let captured = capture_all(&[b"hello ", b"world\n"], 100, 1 << 20);
    assert_eq!(
        captured.window.cut(100, "hint"),
        ("hello world\n".to_owned(), false)
    );
    assert!(!captured.artifact.invalid_utf8);
    assert!(!captured.artifact.capped);
}

#[test]
fn long_output_keeps_head_and_tail_within_the_limit() {
    let line = b"0123456789\n".repeat(10_000);
    let captured = capture_all(&[&line, b"THE END\n"], 1_000, 50_000);
    assert!(captured.artifact.capped);
    assert_eq!(captured.artifact.size, 50_000);
    assert_eq!(captured.artifact.total_bytes, 110_008);
    let (text, cut) = captured.window.cut(1_000, "see artifact");
    assert!(cut);
    assert!(text.chars().count() <= 1_000, "{}", text.len());
    assert!(text.starts_with("0123456789\n"));
    assert!(text.ends_with("THE END\n"));
    assert!(text.contains("bytes elided; see artifact]"));
}

#[test]
fn invalid_utf8_is_flagged_and_replaced_but_split_characters_are_not() {
    let euro = "€".as_bytes();
    let split = capture_all(&[&euro[..1], &euro[1..]], 100, 1 << 20);
    assert!(!split.artifact.invalid_utf8);
    assert_eq!(split.window.head, "€");

    let broken = capture_all(&[b"ok \xff\xfe end"], 100, 1 << 20);
    assert!(broken.artifact.invalid_utf8);
    assert_eq!(broken.window.head, "ok \u{fffd}\u{fffd} end");
}

#[test]
fn a_short_stream_stays_in_memory_and_a_long_one_goes_to_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::new(dir.path(), 1 << 30, u64::MAX).unwrap();
    let capture_of = |bytes: &[u8]| {
        let mut capture = store.capture(25_000);
        for chunk in bytes.chunks(4096) {
            capture.push(chunk);
        }
        capture.finish(&store).artifact
    };
    let short = capture_of(b"hi\n");
    assert!(
        matches!(store.lookup(&short.id), Some(StoredArtifact::Memory(bytes)) if &*bytes == b"hi\n")
    );
    assert!(
        !dir.path().join(&short.id).exists(),
        "no file for a short stream"
    );

    let long: Vec<u8> = (0..IN_MEMORY_MAX + 10).map(|i| (i % 251) as u8).collect();
    let artifact = capture_of(&long);
    let Some(StoredArtifact::File(path)) = store.lookup(&artifact.id) else {
        panic!("a long stream is in a file");
    };
    assert_eq!(fs::read(path).unwrap(), long);
    assert_eq!(artifact.sha256, hex::encode(Sha256::digest(&long)));

    // Asked for as a file (to serve byte ranges), the short one is written out.
    let Some(Ok(StoredArtifact::File(path))) = store.file(&short.id) else {
        panic!("written out on request");
    };
    assert_eq!(fs::read(path).unwrap(), b"hi\n");
}

#[test]
fn memory_past_its_budget_is_written_out_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::new(dir.path(), 1 << 30, u64::MAX).unwrap();
    let chunk = vec![b'x'; IN_MEMORY_MAX];
    let count = (MEMORY_BUDGET as usize / IN_MEMORY_MAX) + 2;
    let ids: Vec<String> = (0..count)
        .map(|_| {
            let mut capture = store.capture(25_000);
            capture.push(&chunk);
            capture.finish(&store).artifact.id
        })
        .collect();
    let in_file = |id: &String| matches!(store.lookup(id), Some(StoredArtifact::File(_)));
    assert!(
        in_file(&ids[0]) && in_file(&ids[1]),
        "the oldest went to files"
    );
    assert!(!in_file(&ids[count - 1]), "the newest stays in memory");
    for id in &ids {
        let bytes = match store.lookup(id).unwrap() {
            StoredArtifact::File(path) => fs::read(path).unwrap(),
            StoredArtifact::Memory(bytes) => bytes.to_vec(),
            StoredArtifact::Empty => Vec::new(),
        };
        assert_eq!(bytes, chunk, "nothing lost");
    }
}

#[test]
fn indent_skips_blank_lines() {
    assert_eq!(indent("a\n\n b\n"), "  a\n\n   b\n");
}
