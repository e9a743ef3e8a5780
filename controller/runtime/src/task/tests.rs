use super::*;

fn load(text: &str) -> Result<TaskFile, InputError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("task.yaml");
    std::fs::write(&path, text).unwrap();
    TaskFile::load(&path)
}

#[test]
fn unknown_keys_and_wrong_types_name_the_key_and_the_file() {
    let err = load("prompt: hi\nmodle: {name: x}\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("task.yaml") && err.contains("unknown field `modle`"),
        "{err}"
    );
    let err = load("prompt: hi\nlimits: {max_turns: many}\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("limits.max_turns") || err.contains("max_turns"),
        "{err}"
    );
    assert!(err.contains("invalid type"), "{err}");
    let err = load("prompt: hi\nworkspace: {zip: a.zip}\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `zip`"), "{err}");
    let err = load("prompt: hi\nworkspace: {dir: a, archive: b.tar}\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("workspace: give only one of"), "{err}");
    let err = load("prompt: '  '\n").unwrap_err().to_string();
    assert!(err.contains("prompt: must not be empty"), "{err}");
}

#[test]
fn relative_paths_follow_the_task_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    let path = dir.path().join("task.yaml");
    let text = "prompt: hi\nworkspace: {dir: ws}\nmodel: {name: 'script:turns.yaml'}\n";
    std::fs::write(&path, text).unwrap();
    let task = TaskFile::load(&path).unwrap();
    let Some(WorkspaceSource::Dir(dir)) = task.workspace_source().unwrap() else {
        panic!()
    };
    assert!(
        dir.ends_with("ws") && dir.is_absolute(),
        "{}",
        dir.display()
    );
    assert!(task.model.unwrap().name.ends_with("/turns.yaml"));
}

#[test]
fn a_workspace_that_is_not_there_is_refused_as_the_task_loads() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("workspace")).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "").unwrap();
    let path = dir.path().join("task.yaml");
    std::fs::write(&path, "prompt: hi\nworkspace: {dir: workspce}\n").unwrap();
    let err = TaskFile::load(&path).unwrap_err().to_string();
    let looked = dir.path().join("workspce");
    assert!(
        err.contains("task.yaml: workspace.dir: `workspce` does not exist")
            && err.contains(&format!("looked for at {}", looked.display()))
            && err.contains("did you mean `workspace`?"),
        "{err}"
    );
    std::fs::write(&path, "prompt: hi\nworkspace: {dir: notes.txt}\n").unwrap();
    let err = TaskFile::load(&path).unwrap_err().to_string();
    assert!(err.contains("`notes.txt` is not a folder"), "{err}");
    std::fs::write(&path, "prompt: hi\nworkspace: {archive: workspace}\n").unwrap();
    let err = TaskFile::load(&path).unwrap_err().to_string();
    assert!(
        err.contains("workspace.archive: `workspace` is not a file"),
        "{err}"
    );
}
