use super::load_at;
use crate::BlobBudget;
use harness_log::testing::{bash_result, blob_text, put_blob, write_events};
use harness_log::{Event, ToolCallEvent};

/// A log of `n` calls whose outputs are all the one blob of `size` bytes.
fn one_blob_for_every_call(n: u64, size: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let output = blob_text(put_blob(dir.path(), &vec![b'o'; size]));
    let events = (0..n).flat_map(|call| {
        let call_id = format!("call_{call}");
        [
            Event::ToolCall(ToolCallEvent {
                call_id: call_id.clone(),
                name: "bash".to_owned(),
                arguments: "{}".to_owned(),
            }),
            bash_result(call_id, output.clone()),
        ]
    });
    write_events(dir.path(), events);
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
