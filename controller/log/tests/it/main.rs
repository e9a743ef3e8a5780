//! This crate's generated file: The event log's schema, as the committed copy in `proto-docs/event-log.schema.json`
//! (a difference rewrites it and fails, so the change is seen and committed).

#[test]
fn committed_event_log_schema_is_current() {
    let schema = serde_json::to_string_pretty(&harness_log::schema()).unwrap() + "\n";
    testkit::ensure_file_contents(
        &testkit::repo_root().join("proto-docs/event-log.schema.json"),
        &schema,
    );
}
