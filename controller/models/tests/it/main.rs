//! This crate's generated file: The scripted model's file format, as the committed copy in `proto-docs/scripted-model.schema.json`
//! (a difference rewrites it and fails, so the change is seen and committed).

#[test]
fn committed_scripted_model_schema_is_current() {
    let schema = serde_json::to_string_pretty(&harness_models::script_schema()).unwrap() + "\n";
    testkit::ensure_file_contents(
        &testkit::repo_root().join("proto-docs/scripted-model.schema.json"),
        &schema,
    );
}
