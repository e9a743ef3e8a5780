//! This crate's generated file: The hooks' file and payloads, as the committed copy in `proto-docs/hooks.schema.json`
//! (a difference rewrites it and fails, so the change is seen and committed).

#[test]
fn committed_hooks_schema_is_current() {
    let schema = serde_json::to_string_pretty(&harness_runtime::hooks::schema()).unwrap() + "\n";
    testkit::ensure_file_contents(
        &testkit::repo_root().join("proto-docs/hooks.schema.json"),
        &schema,
    );
}
