use std::os::unix::fs::{PermissionsExt, symlink};

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common::{self, Answer};

#[tokio::test]
async fn put_then_get_is_binary_safe_and_sets_modes() {
    let server = common::start().await;
    let bytes: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let (status, body) = server
        .request(reqwest::Method::PUT, "/v1/files/bin/tool.dat?mode=0755")
        .body(bytes.clone())
        .answer()
        .await;
    assert_eq!(status, 201);
    assert_eq!(
        body,
        json!({"path": "bin/tool.dat", "bytes_written": 70_000, "created": true})
    );
    let mode = std::fs::metadata(server.path("bin/tool.dat"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);

    let response = server
        .send(reqwest::Method::GET, "/v1/files/bin/tool.dat")
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-length"], "70000");
    assert_eq!(response.bytes().await.unwrap().to_vec(), bytes);

    let response = server
        .request(reqwest::Method::PUT, "/v1/files/bin/tool.dat")
        .body("new")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "replacing is not creating");
    let mode = std::fs::metadata(server.path("bin/tool.dat"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755, "an existing file keeps its mode");

    let (status, body) = server
        .request(reqwest::Method::PUT, "/v1/files/x?mode=999")
        .body("x")
        .answer()
        .await;
    assert_eq!(status, 422);
    assert_eq!(
        body["error"]["message"],
        "mode: expected octal permission bits such as 0644, got `999`"
    );
}

#[tokio::test]
async fn raw_files_keep_the_workspace_boundary() {
    let server = common::start().await;
    let outside = tempfile::tempdir().unwrap();
    symlink(outside.path(), server.path("out")).unwrap();
    for (method, path) in [
        (reqwest::Method::GET, "/v1/files/out/x"),
        (reqwest::Method::PUT, "/v1/files/out/x"),
        (reqwest::Method::PUT, "/v1/files/..%2Fescape"),
        (reqwest::Method::GET, "/v1/files/%2Fetc%2Fpasswd"),
        (reqwest::Method::GET, "/v1/dirs/out"),
        (reqwest::Method::GET, "/v1/dirs/..%2F.."),
    ] {
        let (status, body) = server
            .request(method.clone(), path)
            .body("x")
            .answer()
            .await;
        assert_eq!(status, 403, "{method} {path}");
        assert_eq!(
            body["error"]["type"], "outside_workspace",
            "{method} {path}"
        );
    }
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    let response = server
        .send(reqwest::Method::GET, "/v1/files/missing.txt")
        .await;
    assert_eq!(response.status(), 404);
}

#[tokio::test]
async fn directories_are_listed_sorted_without_following_links() {
    let server = common::start().await;
    std::fs::create_dir_all(server.path(".agents/skills/b-skill")).unwrap();
    std::fs::create_dir_all(server.path(".agents/skills/a-skill")).unwrap();
    std::fs::write(server.path(".agents/skills/notes.txt"), "12345").unwrap();
    symlink("/etc", server.path(".agents/skills/link")).unwrap();
    let (status, listing) = server.get_json("/v1/dirs/.agents/skills").await;
    assert_eq!(status, 200);
    let entries = common::string_pairs(&listing["entries"], "name", "kind");
    let expected = [
        ("a-skill", "dir"),
        ("b-skill", "dir"),
        ("link", "symlink"),
        ("notes.txt", "file"),
    ];
    assert_eq!(entries, expected);

    let (status, root) = server.get_json("/v1/dirs").await;
    assert_eq!(status, 200);
    assert_eq!(root["entries"][0]["name"], ".agents");

    let (status, body) = server.get_json("/v1/dirs/.agents/skills/notes.txt").await;
    assert_eq!(
        (status, body["error"]["type"].as_str().unwrap()),
        (403, "not_a_directory")
    );
}
