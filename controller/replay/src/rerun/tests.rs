use sha2::{Digest, Sha256};

use super::load_at;
use crate::BlobBudget;
use harness_log::{BlobRef, Envelope, Event, Text, ToolCallEvent, ToolResult, ToolStatus};

/// A log of `n` calls whose outputs are all the one blob of `size` bytes.
fn one_blob_for_every_call(n: u64, size: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("blobs")).unwrap();
    let bytes = vec![b'o'; size];
    let sha256 = hex::encode(Sha256::digest(&bytes));
    std::fs::write(dir.path().join("blobs").join(&sha256), &bytes).unwrap();
    let output = Text {
        text: None,
        blob: Some(BlobRef {
            sha256,
            size: size as u64,
        }),
        preview: None,
        size: size as u64,
    };
    let mut lines = String::new();
    for call in 0..n {
        let call_id = format!("call_{call}");
        let events = [
            Event::ToolCall(ToolCallEvent {
                call_id: call_id.clone(),
                name: "bash".to_owned(),
                arguments: "{}".to_owned(),
            }),
            Event::ToolResult(ToolResult {
                call_id,
                name: "bash".to_owned(),
                status: ToolStatus::Ok,
                output: output.clone(),
                exit_code: Some(0),
                timed_out: None,
                duration_ms: 1,
                outputs: Vec::new(),
            }),
        ];
        for (i, event) in events.into_iter().enumerate() {
            let seq = call * 2 + i as u64;
            let ts = "2026-01-01T00:00:00.000Z".to_owned();
            let envelope = Envelope { seq, ts, event };
            lines.push_str(&serde_json::to_string(&envelope).unwrap());
            lines.push('\n');
        }
    }
    std::fs::write(dir.path().join("events.jsonl"), lines).unwrap();
    dir
}

/// Every call's output naming one blob costs its size each time: past the rerun's budget the
/// log is refused, saying why, instead of held once per call.
#[test]
fn one_blob_for_every_call_spends_the_reruns_budget() {
    let log = one_blob_for_every_call(60, 1000);
    let err = load_at(log.path(), 0, &mut 0, &mut BlobBudget::new(10_000, 1000))
        .unwrap_err()
        .to_string();
    assert!(err.contains("resolve to more than 10000 bytes"), "{err}");
    let mut enough = BlobBudget::new(60_000, 1000);
    let recording = load_at(log.path(), 0, &mut 0, &mut enough).unwrap();
    assert_eq!(recording.calls.len(), 60);
    assert!(recording.calls.iter().all(|call| call.output.len() == 1000));
    assert_eq!(enough.left(), 0);
    // A longer output is cut, and says so.
    let recording = load_at(log.path(), 0, &mut 0, &mut BlobBudget::new(60_000, 10)).unwrap();
    assert!(
        recording.calls[0]
            .output
            .contains("only its first 10 are kept"),
        "{}",
        recording.calls[0].output
    );
}
