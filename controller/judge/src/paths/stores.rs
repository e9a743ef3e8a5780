//! Where secrets live, by class rather than by example: the stores of common tools (a folder
//! covers everything under it), key and token files outside the workspace by their names,
//! another process's memory, environment, command line, descriptors and root under `/proc`,
//! and raw devices and kernel images.

use super::{Token, literal, matches};

/// A place that holds credentials; `~` stands for each home.
struct Store {
    path: &'static str,
    /// A folder: the store is the folder and everything below it.
    folder: bool,
}

const fn folder(path: &'static str) -> Store {
    Store { path, folder: true }
}

const fn file(path: &'static str) -> Store {
    Store {
        path,
        folder: false,
    }
}

/// The stores, by the class of tool that keeps them.
const STORES: &[Store] = &[
    // Keys and keychains.
    folder("~/.ssh"),
    folder("~/.gnupg"),
    folder("~/.password-store"),
    folder("~/.local/share/keyrings"),
    folder("~/.pki"),
    folder("~/.config/sops"),
    // Cloud and cluster command lines.
    folder("~/.aws"),
    folder("~/.azure"),
    folder("~/.config/gcloud"),
    folder("~/.oci"),
    folder("~/.kube"),
    folder("~/.minikube"),
    folder("~/.docker"),
    file("~/.config/containers/auth.json"),
    folder("~/.config/doctl"),
    folder("~/.config/hcloud"),
    folder("~/.terraform.d"),
    file("~/.terraformrc"),
    folder("~/.pulumi"),
    file("~/.databrickscfg"),
    folder("~/.snowflake"),
    file("~/.vault-token"),
    folder("~/.config/rclone"),
    file("~/.s3cfg"),
    file("~/.boto"),
    folder("~/.config/op"),
    // Forges and git.
    folder("~/.config/gh"),
    file("~/.config/hub"),
    folder("~/.config/glab-cli"),
    file("~/.git-credentials"),
    file("~/.config/git/credentials"),
    // Agents' and model providers' tokens.
    folder("~/.codex"),
    folder("~/.claude"),
    file("~/.claude.json"),
    folder("~/.config/github-copilot"),
    folder("~/.config/openai"),
    folder("~/.config/anthropic"),
    folder("~/.gemini"),
    folder("~/.huggingface"),
    file("~/.cache/huggingface/token"),
    // Browser profiles: saved passwords, cookies, session tokens.
    folder("~/.mozilla"),
    folder("~/.config/google-chrome"),
    folder("~/.config/chromium"),
    folder("~/.config/BraveSoftware"),
    folder("~/.config/microsoft-edge"),
    folder("~/.config/vivaldi"),
    folder("~/.config/opera"),
    folder("~/snap/firefox"),
    folder("~/snap/chromium"),
    folder("~/.var/app"),
    // Desktop sessions and agents' sockets.
    file("~/.Xauthority"),
    folder("/run/user"),
    // The netrc family.
    file("~/.netrc"),
    file("~/.netrc.gpg"),
    file("~/_netrc"),
    file("~/.authinfo"),
    file("~/.authinfo.gpg"),
    // Package registries.
    file("~/.npmrc"),
    file("~/.yarnrc.yml"),
    file("~/.yarnrc"),
    file("~/.pypirc"),
    folder("~/.config/pip"),
    file("~/.pip/pip.conf"),
    file("~/.bundle/config"),
    folder("~/.config/configstore"),
    file("~/.local/share/containers/auth.json"),
    file("~/.cargo/credentials"),
    file("~/.cargo/credentials.toml"),
    file("~/.gem/credentials"),
    file("~/.m2/settings.xml"),
    file("~/.m2/settings-security.xml"),
    file("~/.gradle/gradle.properties"),
    file("~/.nuget/NuGet/NuGet.Config"),
    file("~/.composer/auth.json"),
    file("~/.config/composer/auth.json"),
    // Databases.
    file("~/.pgpass"),
    file("~/.my.cnf"),
    file("~/.mylogin.cnf"),
    // The system's.
    file("/etc/shadow"),
    file("/etc/gshadow"),
    file("/etc/sudoers"),
    folder("/etc/sudoers.d"),
    file("/etc/ssh/ssh_host_rsa_key"),
    file("/etc/ssh/ssh_host_ecdsa_key"),
    file("/etc/ssh/ssh_host_ed25519_key"),
    folder("/etc/ssl/private"),
    folder("/etc/pki/tls/private"),
    folder("/etc/letsencrypt/live"),
    folder("/etc/letsencrypt/archive"),
    folder("/etc/kubernetes"),
    folder("/var/lib/kubelet/pki"),
    folder("/etc/rancher"),
    folder("/etc/wireguard"),
    folder("/etc/NetworkManager/system-connections"),
    folder("/run/secrets"),
    folder("/var/run/secrets"),
];

/// Folders and files that hold credentials wherever they are (a home reached through `cd`, a
/// variable, a relative path from an unknown folder).
const NAMES: &[&str] = &[
    ".ssh",
    ".aws",
    ".azure",
    ".gnupg",
    ".kube",
    ".netrc",
    "_netrc",
    ".authinfo",
    ".git-credentials",
    ".pgpass",
    ".npmrc",
    ".pypirc",
    ".vault-token",
    ".s3cfg",
    ".boto",
    ".my.cnf",
    ".mylogin.cnf",
    ".password-store",
    ".terraformrc",
    ".databrickscfg",
    ".codex",
    ".claude",
    ".mozilla",
    "github-copilot",
];

/// Whether a file's or folder's name puts it in a class of stores wherever it is: the netrc
/// family and its copies (`.netrc.bak`, `.netrc~`), and the histories of shells and programs,
/// which hold the secrets typed into them.
fn store_class(name: &str) -> Option<&'static str> {
    if name.starts_with(".netrc") || name.starts_with("_netrc") {
        return Some("the netrc family (.netrc*)");
    }
    let histories = [".histfile", ".lesshst", ".viminfo", "fish_history"];
    if name.ends_with("_history") || name.ends_with("-history") || histories.contains(&name) {
        return Some("a shell or program history");
    }
    None
}

/// Key files are credentials wherever they are.
const KEY_NAMES: &[&str] = &["id_rsa", "id_ed25519", "id_ecdsa", "id_dsa"];

/// Names of key and token files, probed against a pattern's last component; any match is a
/// secret file when it sits outside the workspace in a home or the system's folders.
const SECRET_FILE_PROBES: &[&str] = &[
    "id_rsa",
    "id_ed25519",
    "x.pem",
    "x.key",
    "x.p12",
    "x.pfx",
    "x.jks",
    "x.keystore",
    "x.kdbx",
    "credentials",
    "credentials.json",
    "token",
    ".vault-token",
    "msal_token_cache.json",
    "tokens.json",
];

/// Whether a file's name says it holds a key or a token.
fn secret_file_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    (lower.starts_with("id_") && !lower.ends_with(".pub"))
        || [".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".kdbx"]
            .iter()
            .any(|suffix| lower.ends_with(suffix))
        || lower.contains("credentials")
        || BROWSER_AND_AGENT_FILES.contains(&lower.as_str())
        || lower.ends_with("token")
        || lower.contains("token_cache")
        || (lower.contains("tokens") && lower.ends_with(".json"))
}

/// Files of browsers (saved passwords, cookies, their keys) and of agents and package managers
/// (tokens), by name, lowercase.
const BROWSER_AND_AGENT_FILES: &[&str] = &[
    "login data",
    "cookies",
    "logins.json",
    "key4.db",
    "key3.db",
    "cookies.sqlite",
    "auth.json",
    "hosts.json",
    "pip.conf",
];

/// Folders under which a key or token file by its name is a secret.
const SECRET_ROOTS: &[&str] = &[
    "/root/",
    "/home/",
    "/etc/",
    "/run/",
    "/var/lib/",
    "/var/run/",
    "/opt/",
    "/srv/",
];

/// Public certificates, not secrets, whatever their names.
const PUBLIC_CERTIFICATES: &[&str] = &[
    "/etc/ssl/certs/",
    "/etc/ca-certificates/",
    "/etc/pki/ca-trust/",
    "/usr/share/ca-certificates/",
];

/// Whether the tokens match `folder` and then go on below it (a `/`, or anything).
fn matches_under(tokens: &[Token], folder: &str) -> bool {
    (1..tokens.len()).any(|split| {
        matches!(tokens[split], Token::Char('/') | Token::Any) && matches(&tokens[..split], folder)
    })
}

/// `/home/NAME/…` as `/home/user/…`: every home is a home.
fn any_home(tokens: &[Token]) -> Vec<Token> {
    let prefix: Vec<Token> = "/home/".chars().map(Token::Char).collect();
    if !tokens.starts_with(&prefix) {
        return tokens.to_vec();
    }
    let rest = &tokens[prefix.len()..];
    let end = rest
        .iter()
        .position(|t| *t == Token::Char('/'))
        .unwrap_or(rest.len());
    let mut out = prefix;
    out.extend("user".chars().map(Token::Char));
    out.extend_from_slice(&rest[end..]);
    out
}

/// The credential store the tokens reach, if any: by its place under a home or the system, by
/// its name anywhere, by a key or token file's name outside the workspace, or under `/proc`.
pub(super) fn reach(tokens: &[Token], homes: &[String]) -> Option<String> {
    let tokens = any_home(tokens);
    for home in homes {
        for store in STORES {
            let concrete = store.path.replacen('~', home, 1);
            if matches(&tokens, &concrete) || (store.folder && matches_under(&tokens, &concrete)) {
                return Some(store.path.to_owned());
            }
        }
    }
    if let Some(hit) = proc_reach(&tokens, homes) {
        return Some(hit);
    }
    let components: Vec<&[Token]> = tokens.split(|t| *t == Token::Char('/')).collect();
    let last = components.len().saturating_sub(1);
    for (index, component) in components.iter().enumerate() {
        let literal = component.iter().any(|t| matches!(t, Token::Char(_)));
        if !literal {
            continue;
        }
        if let Some(name) = NAMES.iter().find(|name| matches(component, name)) {
            return Some((*name).to_owned());
        }
        if let Some(class) = super::literal(component).as_deref().and_then(store_class) {
            return Some(class.to_owned());
        }
        if index == last
            && let Some(name) = KEY_NAMES.iter().find(|name| matches(component, name))
        {
            return Some(format!("a private key ({name})"));
        }
    }
    secret_file(&tokens, components.last().copied().unwrap_or_default())
}

/// A key or token file by its name, in a home or the system's folders.
fn secret_file(tokens: &[Token], name: &[Token]) -> Option<String> {
    let prefix: String = tokens.iter().map_while(Token::as_char).collect();
    let in_root = SECRET_ROOTS.iter().any(|root| prefix.starts_with(root))
        && !PUBLIC_CERTIFICATES
            .iter()
            .any(|root| prefix.starts_with(root));
    if !in_root {
        return None;
    }
    let secret = match literal(name) {
        Some(text) => secret_file_name(&text),
        None => SECRET_FILE_PROBES.iter().any(|probe| matches(name, probe)),
    };
    secret.then(|| "a key or token file".to_owned())
}

/// The pids probed in `/proc`: this process's, PID 1, another.
const PIDS: &[&str] = &["self", "1", "4242"];
/// What is read of a process, and whether reading the command's own is fine too.
const PROC_LEAVES: &[(&str, bool)] = &[
    ("environ", false),
    ("mem", false),
    ("pagemap", false),
    ("map_files/x", false),
    ("cmdline", true),
    ("fd/3", true),
];

/// Another process's memory, environment, command line or descriptors, or a file under a
/// process's root, by any path to it (`/proc/*/task/*/environ`, `/proc/thread-self/..`).
fn proc_reach(tokens: &[Token], homes: &[String]) -> Option<String> {
    let starts = |text: &str| matches_under(tokens, text) || matches(tokens, text);
    if !starts("/proc") {
        return None;
    }
    for pid in PIDS {
        for task in ["", "task/self/", "task/1/", "task/4242/"] {
            for (leaf, own_is_fine) in PROC_LEAVES {
                let probe = format!("/proc/{pid}/{task}{leaf}");
                if matches(tokens, &probe) && !(*own_is_fine && *pid == "self") {
                    let what = leaf.split('/').next().unwrap_or(leaf);
                    return Some(format!("a process's {what} (/proc/…/{what})"));
                }
            }
            // `/proc/PID/root/…` is that process's file system: judge what it leads to.
            let root = format!("/proc/{pid}/{task}root");
            for split in (1..tokens.len()).filter(|&s| tokens[s] == Token::Char('/')) {
                if matches(&tokens[..split], &root)
                    && let Some(hit) = reach(&tokens[split..], homes)
                {
                    return Some(format!("{hit}, through /proc/…/root"));
                }
            }
        }
    }
    None
}

/// The stores below `folder` (a normalised absolute path), for commands that walk it.
pub(super) fn below(folder: &str, home: &str) -> Option<&'static str> {
    let prefix = if folder == "/" {
        folder.to_owned()
    } else {
        format!("{folder}/")
    };
    STORES
        .iter()
        .find(|store| {
            let concrete = store.path.replacen('~', home, 1);
            concrete.starts_with(&prefix) || concrete == folder
        })
        .map(|store| store.path)
}

/// The device nodes commands may use (the sandbox's own `/dev` holds only these).
const SAFE_DEVICES: &[&str] = &[
    "null", "zero", "full", "random", "urandom", "tty", "ptmx", "pts", "shm", "fd", "stdin",
    "stdout", "stderr", "tcp", "udp",
];

/// Device names probed against a pattern under `/dev`.
const DEVICE_PROBES: &[&str] = &[
    "sda",
    "sda1",
    "vda",
    "xvda",
    "nvme0n1",
    "hda",
    "mem",
    "kmem",
    "port",
    "loop0",
    "dm-0",
    "md0",
    "mmcblk0",
    "mapper/root",
    "disk/by-id/x",
    "disk/by-uuid/x",
    "block/8:0",
    "char/1:1",
    "sr0",
    "nbd0",
    "zram0",
    "sg0",
    "input/event0",
];

/// Kernel memory and images, besides `/dev`.
const KERNEL_FILES: &[&str] = &["/proc/kcore", "/proc/kmem"];
const KERNEL_IMAGE_PREFIXES: &[&str] = &["/boot/vmlinu", "/boot/initrd", "/boot/System.map"];
/// Kernel images, probed against a pattern.
const KERNEL_IMAGE_PROBES: &[&str] = &[
    "/boot/vmlinuz-6.1.0-18-amd64",
    "/boot/vmlinux",
    "/boot/initrd.img-6.1.0-18-amd64",
    "/boot/initramfs-6.1.0.img",
    "/boot/System.map-6.1.0-18-amd64",
];

/// A raw device, kernel memory or a kernel image the tokens reach: anything under `/dev` that
/// is not one of the nodes programs need, `/proc/kcore`, `/boot/vmlinuz*`, `/boot/initrd*`.
pub(super) fn device(tokens: &[Token]) -> Option<String> {
    if let Some(path) = literal(tokens) {
        return device_path(&path);
    }
    // A pattern names a device only from a literal root (`/dev/sd?`, `/dev/*`); `$X` or
    // `$X/sda` could be anything.
    if tokens.first() != Some(&Token::Char('/')) {
        return None;
    }
    DEVICE_PROBES
        .iter()
        .map(|probe| format!("/dev/{probe}"))
        .chain(KERNEL_FILES.iter().map(|f| (*f).to_owned()))
        .chain(KERNEL_IMAGE_PROBES.iter().map(|p| (*p).to_owned()))
        .find(|probe| matches(tokens, probe))
        .map(|probe| format!("a raw device or kernel memory ({probe})"))
}

/// The same for a plain, normalised path.
pub(super) fn device_path(path: &str) -> Option<String> {
    if let Some(rest) = path.strip_prefix("/dev/") {
        let first = rest.split('/').next().unwrap_or(rest);
        if !first.is_empty() && !SAFE_DEVICES.contains(&first) {
            return Some(format!("a raw device ({path})"));
        }
        return None;
    }
    if KERNEL_FILES.contains(&path) || KERNEL_IMAGE_PREFIXES.iter().any(|p| path.starts_with(p)) {
        return Some(format!("kernel memory or a kernel image ({path})"));
    }
    None
}
