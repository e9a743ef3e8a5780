//! Issue 55: what a command can read is decided by the sandbox, not by the rules. Whatever a
//! policy lets through, no command reads a file planted in the operator's home or in `/root`,
//! by any route (a `cd` then a recursive search, a link in the workspace, another process's
//! root); the toolchains of the home are there read-only, without their credential files; the
//! workspace is reachable whatever its parents' modes; and no command makes a set-id file. As
//! root (`--run-as nobody`) and as an ordinary user's server alike.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::common::{self, Options, protection};

const NOBODY: u32 = 65534;

/// A home planted outside every temporary folder, as an operator's would be: a private key, a
/// cargo toolchain with a registry token, and a file in `/root` too; removed on drop.
struct Plant {
    home: PathBuf,
    root_file: PathBuf,
    secret: String,
}

impl Plant {
    fn new(owner: Option<u32>) -> Plant {
        let unique = format!("{}-{}", std::process::id(), rand_suffix());
        let secret = format!("PRIVATE-KEY-issue55-{unique}");
        let home = PathBuf::from(format!("/var/lib/harness-test-home-{unique}"));
        for folder in [".ssh", ".cargo/bin", ".config/gh"] {
            std::fs::create_dir_all(home.join(folder)).unwrap();
        }
        std::fs::write(home.join(".ssh/id_rsa"), format!("{secret}\n")).unwrap();
        std::fs::write(
            home.join(".config/gh/hosts.yml"),
            format!("token: {secret}\n"),
        )
        .unwrap();
        std::fs::write(
            home.join(".cargo/credentials.toml"),
            format!("[registry]\ntoken = \"{secret}\"\n"),
        )
        .unwrap();
        std::fs::write(
            home.join(".cargo/bin/tool"),
            "#!/bin/sh\necho toolchain-ran\n",
        )
        .unwrap();
        std::fs::set_permissions(
            home.join(".cargo/bin/tool"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();
        if let Some(owner) = owner {
            chown_tree(&home, owner);
        }
        let root_file = PathBuf::from(format!("/root/.harness-test-{unique}"));
        std::fs::write(&root_file, format!("{secret}\n")).unwrap();
        Plant {
            home,
            root_file,
            secret,
        }
    }
}

impl Drop for Plant {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
        let _ = std::fs::remove_file(&self.root_file);
    }
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64 % 1_000_000_007)
}

fn chown_tree(path: &Path, owner: u32) {
    std::os::unix::fs::lchown(path, Some(owner), Some(owner)).unwrap();
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), owner);
        }
    }
}

async fn run(server: &common::Server, cmd: &str) -> String {
    let (_, body) = server
        .call("bash", json!({"cmd": cmd, "timeout": 60}))
        .await;
    format!("{}{}", body["stdout"], body["stderr"])
}

/// Every route the review used, and more: each must print nothing of the secret.
fn attempts(plant: &Plant) -> Vec<String> {
    let home = plant.home.display();
    let root_file = plant.root_file.display();
    vec![
        format!("cat {home}/.ssh/id_rsa"),
        format!("cat {root_file}"),
        format!("cd {home} && grep -r PRIVATE ."),
        format!("cd {home}/.config && grep -r token ."),
        "cd / && grep -rs PRIVATE root home 2>/dev/null | head -5".to_owned(),
        format!(
            "cd {}/.. && grep -rs PRIVATE {} 2>/dev/null | head -5",
            home,
            plant.home.file_name().unwrap_or_default().to_string_lossy()
        ),
        format!("cd {home} && tar cf - . 2>/dev/null | strings | grep PRIVATE"),
        "cat notes.txt".to_owned(),
        "grep -r . docs/keys/".to_owned(),
        format!("while read l; do echo \"$l\"; done < {home}/.ssh/id_rsa"),
        format!("cat /proc/*/root{home}/.ssh/id_rsa 2>/dev/null"),
        format!("cat /proc/*/cwd/.ssh/id_rsa 2>/dev/null"),
        format!("python3 -c \"print(open('{home}/.ssh/id_rsa').read())\""),
        format!("cat {home}/.cargo/credentials.toml"),
        format!("find {home} /root -type f -exec cat {{}} + 2>/dev/null"),
    ]
}

/// Runs every attempt and the checks of what stays usable; returns what the commands printed.
async fn probe(server: &common::Server, plant: &Plant) {
    // A repository the agent is given links into the home (made by the test, not a command).
    std::os::unix::fs::symlink(plant.home.join(".ssh/id_rsa"), server.path("notes.txt")).unwrap();
    std::fs::create_dir(server.path("docs")).unwrap();
    std::os::unix::fs::symlink(plant.home.join(".ssh"), server.path("docs/keys")).unwrap();
    for attempt in attempts(plant) {
        let printed = run(server, &attempt).await;
        assert!(
            !printed.contains(&plant.secret),
            "`{attempt}` printed the planted secret: {printed}"
        );
    }
    let home = plant.home.display();
    let usable = run(
        server,
        &format!(
            "{home}/.cargo/bin/tool; echo x > \"$HOME/.rc\" && cat \"$HOME/.rc\"; echo y > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; touch {home}/.cargo/new 2>/dev/null || echo read-only; echo z > w.txt && cat w.txt"
        ),
    )
    .await;
    assert!(usable.contains("toolchain-ran"), "{usable}");
    assert!(usable.contains("x\\ny\\nread-only\\nz"), "{usable}");
    let (_, info) = server.get_json("/v1/info").await;
    assert_eq!(protection(&info, "hidden_home")["active"], true, "{info}");
    assert_eq!(protection(&info, "no_set_id")["active"], true, "{info}");
}

/// The review's HIGH findings 2 and 3, as root: commands run as `nobody` over a workspace whose
/// parent is private (once refused), and read nothing of the homes by any route.
#[tokio::test]
#[cfg_attr(not(harness_root), ignore = "needs root")]
async fn issue_55_a_root_servers_commands_read_nothing_of_the_homes() {
    let plant = Plant::new(None);
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let workspace = tempfile::tempdir_in(private.path()).unwrap();
    let server = common::start_in(
        workspace,
        Options {
            extra_args: vec!["--run-as".to_owned(), "nobody".to_owned()],
            env: vec![("HOME".to_owned(), plant.home.display().to_string())],
            ..Options::default()
        },
    )
    .await;
    probe(&server, &plant).await;
    let mounts = run(&server, "findmnt -no OPTIONS \"$PWD\"").await;
    assert!(mounts.contains("nosuid"), "{mounts}");
}

/// The same as an ordinary user's server: its own user and mount namespace (or Landlock alone
/// where the host allows no user namespace) hide its home.
#[tokio::test]
#[cfg_attr(not(harness_root), ignore = "needs root")]
async fn issue_55_an_ordinary_users_commands_read_nothing_of_its_home() {
    let plant = Plant::new(Some(NOBODY));
    let server = common::start_with(Options {
        env: vec![("HOME".to_owned(), plant.home.display().to_string())],
        user: Some(NOBODY),
        ..Options::default()
    })
    .await;
    probe(&server, &plant).await;
}

/// The review's HIGH finding 1: no command, and no request, leaves a set-id file where commands
/// run; nothing in the workspace on disk is set-id afterwards.
#[tokio::test]
#[cfg_attr(not(harness_root), ignore = "needs root")]
async fn issue_55_no_set_id_file_is_ever_made() {
    for user in [None, Some(NOBODY)] {
        let server = common::start_with(Options {
            extra_args: if user.is_none() {
                vec!["--run-as".to_owned(), "nobody".to_owned()]
            } else {
                Vec::new()
            },
            user,
            ..Options::default()
        })
        .await;
        let printed = run(
            &server,
            "cp /bin/true tool; chmod 4755 tool || echo refused-chmod; chmod u+s tool || echo refused-u+s; \
             mkdir d; chmod 2777 d || echo refused-sgid-dir; install -m 4755 /bin/true t2 || echo refused-install; \
             python3 -c \"import os; os.open('c', os.O_CREAT | os.O_WRONLY, 0o4755)\" || echo refused-create; \
             python3 -c \"import os, stat; os.mknod('m', stat.S_IFREG | 0o6755)\" || echo refused-mknod",
        )
        .await;
        for refused in [
            "refused-chmod",
            "refused-u+s",
            "refused-sgid-dir",
            "refused-install",
            "refused-create",
            "refused-mknod",
        ] {
            assert!(printed.contains(refused), "{user:?}: {refused}: {printed}");
        }
        let (status, body) = server
            .request(reqwest::Method::PUT, "/v1/files/put.sh?mode=4755")
            .body("#!/bin/sh\n")
            .send()
            .await
            .map(|r| (r.status().as_u16(), r))
            .unwrap();
        let body: serde_json::Value = body.json().await.unwrap();
        assert_eq!(status, 201, "{body}");
        assert!(
            body["notes"].to_string().contains("set-user-id"),
            "the upload says it left the bits out: {body}"
        );
        assert_no_set_id(server.workspace.path());
    }
}

fn assert_no_set_id(folder: &Path) {
    for entry in std::fs::read_dir(folder).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(
            meta.mode() & 0o6000,
            0,
            "{} is set-id on disk: {:o}",
            path.display(),
            meta.mode()
        );
        if meta.is_dir() {
            assert_no_set_id(&path);
        }
    }
}
