//! What the generated document cannot say by itself, added to it: byte bodies as binary
//! strings (a generated client sends bytes, not a JSON array of numbers), every status a route
//! can answer with its error body, and the links between operations that a stateful client or
//! fuzzer follows (a snapshot to its changes, changes to a blob, a command to its output and its
//! background processes).

use serde_json::{Map, Value, json};

const BINARY_TYPES: &[&str] = &["application/octet-stream", "application/x-tar"];

/// Calls `visit` with each operation of the document: its path, its method (lowercase, as
/// the document has it) and the operation.
pub(super) fn each_operation(document: &mut Value, mut visit: impl FnMut(&str, &str, &mut Value)) {
    let Some(paths) = document.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, operation) in item.iter_mut() {
            visit(path, method, operation);
        }
    }
}

/// Applies every rule to the document.
pub(super) fn complete(document: &mut Value) {
    each_operation(document, |path, method, operation| {
        binary_bodies(operation);
        // A minted token's answer is its secret, which no key store may keep.
        if path.starts_with("/v1/")
            && !path.starts_with("/v1/tokens")
            && matches!(method, "post" | "put" | "delete")
        {
            idempotency(operation);
        }
        statuses(path, method, operation);
    });
    links(document);
    // The server reads an archive's bytes whatever their declared type (a gzip stream is
    // recognised by its magic number); generated clients mostly know only octet-stream.
    if let Some(content) =
        document.pointer_mut("/paths/~1v1~1workspace~1archive/put/requestBody/content")
    {
        for media_type in ["application/gzip", "application/octet-stream"] {
            content[media_type] = json!({"schema": {"type": "string", "format": "binary", "contentMediaType": media_type}});
        }
    }
    // A header is text or absent, never null: the event number, as the server reads it.
    if let Some(parameters) = document
        .pointer_mut("/paths/~1v1~1processes~1{id}~1events/get/parameters")
        .and_then(Value::as_array_mut)
    {
        for parameter in parameters
            .iter_mut()
            .filter(|p| p["name"] == "Last-Event-ID")
        {
            parameter["schema"] = json!({"type": "string", "pattern": "^[0-9]{1,18}$"});
        }
    }
    // No body writes an empty file: the body is optional there.
    if let Some(body) = document.pointer_mut("/paths/~1v1~1files~1{path}/put/requestBody") {
        body["required"] = json!(false);
    }
}

/// `{type: string, format: binary, contentMediaType}` for every byte body.
fn binary_bodies(operation: &mut Value) {
    let mut contents: Vec<&mut Value> = Vec::new();
    if let Some(content) = operation.pointer_mut("/requestBody/content") {
        contents.push(content);
    }
    for content in contents {
        binary_content(content);
    }
    if let Some(responses) = operation
        .get_mut("responses")
        .and_then(Value::as_object_mut)
    {
        for response in responses.values_mut() {
            if let Some(content) = response.get_mut("content") {
                binary_content(content);
            }
        }
    }
}

fn binary_content(content: &mut Value) {
    let Some(content) = content.as_object_mut() else {
        return;
    };
    for (media_type, body) in content.iter_mut() {
        if BINARY_TYPES.contains(&media_type.as_str()) {
            body["schema"] =
                json!({"type": "string", "format": "binary", "contentMediaType": media_type});
        }
    }
}

fn error(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    })
}

/// The answers any route of its kind can give, where the route's own list lacks them.
fn statuses(path: &str, method: &str, operation: &mut Value) {
    let has_body = operation.get("requestBody").is_some();
    let json_body = operation
        .pointer("/requestBody/content/application~1json")
        .is_some();
    let mut add: Vec<(&str, &str)> = vec![
        (
            "403",
            "A browser request from another site's page (`foreign_origin`), or a path outside the workspace",
        ),
        (
            "500",
            "The server failed (`internal`, `io_error`, `spawn_failed`): a bug or the machine, never the request; logged",
        ),
    ];
    if path.starts_with("/v1/") {
        add.push(("401", "Missing or wrong token (`unauthorized`)"));
    }
    if path.contains('{') {
        add.push(("400", "A path parameter of the wrong type (`bad_request`)"));
    }
    if has_body {
        add.push(("400", "An unreadable body (`bad_request`)"));
        add.push(("413", "The body is over the limit (`payload_too_large`)"));
        add.push((
            "429",
            "The server holds its limit of request bodies (`overloaded`); see `Retry-After`",
        ));
    }
    if json_body {
        add.push((
            "415",
            "The body is not `application/json` (`unsupported_media_type`)",
        ));
    }
    if method == "put" || method == "post" {
        add.push(("429", "Busy (`overloaded`); see `Retry-After`"));
    }
    let Some(responses) = operation
        .get_mut("responses")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for (status, description) in add {
        responses
            .entry(status)
            .or_insert_with(|| error(description));
    }
    sort(responses);
}

/// The `Idempotency-Key` header every mutating route takes, and what it answers.
fn idempotency(operation: &mut Value) {
    let key = json!({
        "name": "Idempotency-Key",
        "in": "header",
        "required": false,
        "description": "Names this request: a repeat of a completed one gets its stored answer \
            (with `Idempotent-Replayed: true`) and runs nothing; a repeat while it runs gets 409; \
            the key on another request gets 422. Kept in memory for `--idempotency-ttl-secs` \
            after the request completed.",
        "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"},
    });
    let parameters = operation
        .as_object_mut()
        .map(|op| op.entry("parameters").or_insert_with(|| json!([])));
    if let Some(Value::Array(parameters)) = parameters {
        parameters.push(key);
    }
    let Some(responses) = operation
        .get_mut("responses")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    responses.entry("409").or_insert_with(|| {
        error("The first request with this `Idempotency-Key` is still running (`idempotency_in_progress`); the message names its call id")
    });
    let reused =
        "or this `Idempotency-Key` already names another request (`idempotency_key_reused`)";
    match responses.get_mut("422") {
        Some(existing) => {
            if let Some(Value::String(text)) = existing.get_mut("description") {
                text.push_str(&format!("; {reused}"));
            }
        }
        None => {
            responses.insert(
                "422".to_owned(),
                error(&format!("A bad `Idempotency-Key`, {reused}")),
            );
        }
    }
    for (status, response) in responses.iter_mut() {
        if status.starts_with('2') {
            response["headers"]["Idempotent-Replayed"] = json!({
                "description": "`true` when this is the stored answer to an earlier request with the same `Idempotency-Key`",
                "schema": {"type": "string", "enum": ["true"]},
            });
        }
    }
}

fn sort(responses: &mut Map<String, Value>) {
    let mut entries: Vec<(String, Value)> = std::mem::take(responses).into_iter().collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    responses.extend(entries);
}

/// A link: from (path, method), its name, to operation, which parameter, from which value.
type Link = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

/// Links between operations (OpenAPI 3.1 `links`), by operation id.
const LINKS: &[Link] = &[
    (
        "/v1/workspace/snapshot",
        "post",
        "ChangesSince",
        "get_changes",
        "query.since",
        "$response.body#/snapshot_id",
        "The changes made after this snapshot",
    ),
    (
        "/v1/workspace/snapshot",
        "post",
        "Manifest",
        "get_snapshot",
        "path.id",
        "$response.body#/snapshot_id",
        "This snapshot's manifest",
    ),
    (
        "/v1/workspace/changes",
        "get",
        "NextChanges",
        "get_changes",
        "query.since",
        "$response.body#/snapshot_id",
        "The changes after the state these lead to",
    ),
    (
        "/v1/workspace/changes",
        "get",
        "ChangedFile",
        "get_blob",
        "path.sha256",
        "$response.body#/changes/0/after/sha256",
        "The new bytes of the first file changed",
    ),
    (
        "/v1/tools/bash",
        "post",
        "Stdout",
        "get_artifact",
        "path.id",
        "$response.body#/stdout_artifact/id",
        "The command's whole standard output",
    ),
    (
        "/v1/tools/bash",
        "post",
        "Stderr",
        "get_artifact",
        "path.id",
        "$response.body#/stderr_artifact/id",
        "The command's whole standard error",
    ),
    (
        "/v1/tools/bash",
        "post",
        "KillBackground",
        "delete_process",
        "path.id",
        "$response.body#/background_pids/0",
        "End the first process the command left running",
    ),
    (
        "/v1/processes",
        "post",
        "Process",
        "get_process",
        "path.id",
        "$response.body#/id",
        "The process as it is now",
    ),
    (
        "/v1/processes",
        "post",
        "Output",
        "get_output",
        "path.id",
        "$response.body#/id",
        "Its output from the start",
    ),
    (
        "/v1/processes",
        "post",
        "Delete",
        "delete_process",
        "path.id",
        "$response.body#/id",
        "End it and forget it",
    ),
    (
        "/v1/shells",
        "post",
        "Run",
        "run_in_shell",
        "path.id",
        "$response.body#/id",
        "Run a command in it",
    ),
    (
        "/v1/processes",
        "post",
        "Stdin",
        "process_stdin",
        "path.id",
        "$response.body#/id",
        "Write to its standard input",
    ),
    (
        "/v1/processes",
        "post",
        "Signal",
        "send_signal",
        "path.id",
        "$response.body#/id",
        "Send it a signal",
    ),
    (
        "/v1/processes",
        "post",
        "Resize",
        "resize",
        "path.id",
        "$response.body#/id",
        "Resize its terminal",
    ),
    (
        "/v1/processes",
        "post",
        "Terminal",
        "pty",
        "path.id",
        "$response.body#/id",
        "Its terminal, over a WebSocket",
    ),
    (
        "/v1/shells",
        "post",
        "Interrupt",
        "interrupt_shell",
        "path.id",
        "$response.body#/id",
        "Interrupt its running command",
    ),
    (
        "/v1/shells",
        "post",
        "Delete",
        "delete_process",
        "path.id",
        "$response.body#/id",
        "End the shell and forget it",
    ),
];

fn links(document: &mut Value) {
    for &(path, method, name, target, parameter, expression, description) in LINKS {
        for status in ["200", "201"] {
            let pointer = format!(
                "/paths/{}/{method}/responses/{status}",
                path.replace('/', "~1")
            );
            let Some(response) = document.pointer_mut(&pointer) else {
                continue;
            };
            let links = response
                .as_object_mut()
                .map(|r| r.entry("links").or_insert_with(|| json!({})));
            if let Some(links) = links {
                links[name] = json!({
                    "operationId": target,
                    "parameters": {parameter: expression},
                    "description": description,
                });
            }
        }
    }
}
