use std::os::unix::fs::PermissionsExt;

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::common;

#[tokio::test]
async fn read_file_numbers_lines_and_pages() {
    let server = common::start().await;
    std::fs::write(server.path("five.txt"), "a\r\nb\nc\nd\ne").unwrap();
    let whole = server.ok("read_file", json!({"path": "five.txt"})).await;
    assert_eq!(
        whole["output"],
        "   1: a\n   2: b\n   3: c\n   4: d\n   5: e"
    );
    assert_eq!(whole["total_lines"], 5);

    let page = server
        .ok(
            "read_file",
            json!({"path": "five.txt", "offset": 1, "limit": 2}),
        )
        .await;
    assert_eq!(
        page["output"],
        "   2: b\n   3: c\n... (lines 2-3 of 5; use offset=3 to read more)"
    );
    assert_eq!(
        (page["first_line"].as_u64(), page["lines_returned"].as_u64()),
        (Some(2), Some(2))
    );

    let last = server
        .ok("read_file", json!({"path": "five.txt", "offset": 3}))
        .await;
    assert_eq!(last["output"], "   4: d\n   5: e\n... (lines 4-5 of 5)");

    let past = server
        .ok("read_file", json!({"path": "five.txt", "offset": 9}))
        .await;
    assert_eq!(
        past["output"],
        "(the file has 5 lines; offset 9 is past the end)"
    );

    std::fs::write(server.path("empty.txt"), "").unwrap();
    let empty = server.ok("read_file", json!({"path": "empty.txt"})).await;
    assert_eq!(
        (empty["output"].as_str(), empty["total_lines"].as_u64()),
        (Some("(empty file)"), Some(0))
    );
}

#[tokio::test]
async fn read_file_cuts_huge_pages_and_counts_every_line() {
    let server = common::start().await;
    let long_line = "x".repeat(200_000);
    std::fs::write(server.path("wide.txt"), format!("{long_line}\nshort\n")).unwrap();
    let result = server.ok("read_file", json!({"path": "wide.txt"})).await;
    assert_eq!(result["total_lines"], 2);
    assert_eq!(result["truncated"], true);
    let output = result["output"].as_str().unwrap();
    assert!(output.chars().count() <= 25_000);
    assert!(output.starts_with("   1: xxx"));
    assert!(output.ends_with("   2: short"));
    assert!(output.contains("read fewer lines"));
}

#[tokio::test]
async fn read_file_refuses_binary_files_and_missing_ones() {
    let server = common::start().await;
    std::fs::write(server.path("blob.bin"), b"\x7fELF\x00\x01\x02 binary").unwrap();
    let (status, body) = server.call("read_file", json!({"path": "blob.bin"})).await;
    assert_eq!(status, 422);
    assert_eq!(body["error"]["type"], "binary_file");
    assert!(
        common::error_message(&body).starts_with("blob.bin: binary file (14 bytes"),
        "{body}"
    );

    let (status, body) = server.call("read_file", json!({"path": "nope.txt"})).await;
    assert_eq!(
        (status, body["error"]["type"].as_str().unwrap()),
        (404, "file_not_found")
    );
    assert_eq!(body["error"]["message"], "nope.txt: no such file");
}

#[tokio::test]
async fn write_file_creates_parents_keeps_modes_and_leaves_no_temporary_file() {
    let server = common::start().await;
    let result = server
        .ok(
            "write_file",
            json!({"path": "deep/er/x.txt", "content": "héllo\n"}),
        )
        .await;
    assert_eq!(result["output"], "wrote 7 bytes");
    assert_eq!(
        (
            result["bytes_written"].as_u64(),
            result["created"].as_bool()
        ),
        (Some(7), Some(true))
    );
    assert_eq!(
        std::fs::read_to_string(server.path("deep/er/x.txt")).unwrap(),
        "héllo\n"
    );

    std::fs::set_permissions(
        server.path("deep/er/x.txt"),
        std::fs::Permissions::from_mode(0o750),
    )
    .unwrap();
    let result = server
        .ok(
            "write_file",
            json!({"path": "deep/er/x.txt", "content": "again"}),
        )
        .await;
    assert_eq!(result["created"], false);
    let metadata = std::fs::metadata(server.path("deep/er/x.txt")).unwrap();
    assert_eq!(metadata.permissions().mode() & 0o7777, 0o750);
    assert_eq!(
        std::fs::read_to_string(server.path("deep/er/x.txt")).unwrap(),
        "again"
    );
    let names: Vec<String> = std::fs::read_dir(server.path("deep/er"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["x.txt"]);

    std::fs::create_dir(server.path("adir")).unwrap();
    let (status, body) = server
        .call("write_file", json!({"path": "adir", "content": "x"}))
        .await;
    assert_eq!(
        (status, body["error"]["type"].as_str().unwrap()),
        (403, "not_a_regular_file")
    );
}

#[tokio::test]
async fn search_replace_needs_exactly_one_match_and_keeps_every_other_byte() {
    let server = common::start().await;
    let original = b"\xef\xbb\xbfline one\r\nline two\r\nthe end";
    std::fs::write(server.path("crlf.txt"), original).unwrap();
    let result = server
        .ok(
            "search_replace",
            json!({"path": "crlf.txt", "search": "two", "replace": "2"}),
        )
        .await;
    assert_eq!(result["output"], "OK");
    assert_eq!(
        std::fs::read(server.path("crlf.txt")).unwrap(),
        b"\xef\xbb\xbfline one\r\nline 2\r\nthe end"
    );

    for (search, kind, count) in [("line", "multiple_matches", 2), ("absent", "no_match", 0)] {
        let replace = json!({"path": "crlf.txt", "search": search, "replace": "x"});
        let (status, body) = server.call("search_replace", replace).await;
        assert_eq!(
            (status, body["error"]["type"].as_str().unwrap()),
            (422, kind)
        );
        assert_eq!(
            body["error"]["message"],
            format!("crlf.txt: search string occurs {count}x, expected exactly once")
        );
    }
    assert_eq!(
        std::fs::read(server.path("crlf.txt")).unwrap(),
        b"\xef\xbb\xbfline one\r\nline 2\r\nthe end"
    );

    let (status, body) = server
        .call(
            "search_replace",
            json!({"path": "missing.txt", "search": "a", "replace": "b"}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["type"].as_str().unwrap()),
        (404, "file_not_found")
    );
}

#[tokio::test]
async fn seed_example_write_edit_read() {
    let server = common::start().await;
    server
        .ok(
            "write_file",
            json!({"path": "demo.txt", "content": "Hello, world!\n"}),
        )
        .await;
    let edit = server
        .ok(
            "search_replace",
            json!({"path": "demo.txt", "search": "world", "replace": "agent"}),
        )
        .await;
    assert_eq!(edit["output"], "OK");
    let read = server.ok("read_file", json!({"path": "demo.txt"})).await;
    assert_eq!(read["output"], "   1: Hello, agent!");
}

/// Writes are atomic either way; `--durable-writes` also fsyncs them, and `/v1/info` says which.
#[tokio::test]
async fn durable_writes_are_a_choice_the_server_reports() {
    for (extra, durable) in [(vec![], false), (vec!["--durable-writes".to_owned()], true)] {
        let server = common::start_with_args(extra).await;
        let (_, info) = server.get_json("/v1/info").await;
        assert_eq!(info["limits"]["durable_writes"], durable, "{info}");
        server
            .ok("write_file", json!({"path": "d/a.txt", "content": "x\n"}))
            .await;
        assert_eq!(
            std::fs::read_to_string(server.path("d/a.txt")).unwrap(),
            "x\n"
        );
        let leftovers: Vec<_> = std::fs::read_dir(server.path("d"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".sandbox-tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "no temporary file is left");
    }
}
