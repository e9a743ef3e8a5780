//! A sandbox-server started by a test on a free loopback port: its command, and the JSON line
//! it prints once bound (`{"listening": ADDR, …}`), which says where it is.

use std::ffi::OsStr;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// `BINARY serve --listen 127.0.0.1:0 --workspace WORKSPACE` with its standard output piped
/// (for the line it prints once bound): a command to add arguments, variables and a standard
/// error to, then start with [`spawn_server`] (or run to its end, for a start that must fail).
#[allow(clippy::disallowed_methods)] // a test's server, started from outside it
pub fn serve(binary: impl AsRef<OsStr>, workspace: &Path) -> Command {
    let mut command = Command::new(binary);
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--workspace"])
        .arg(workspace)
        .stdout(Stdio::piped());
    command
}

/// Starts a server's `command` (its standard output piped, as [`serve`] makes it) and reads the
/// line it prints once bound: the child and that line.
pub fn spawn_server(command: &mut Command) -> (Child, serde_json::Value) {
    let mut child = command
        .spawn()
        .unwrap_or_else(|err| panic!("{command:?} did not start: {err}"));
    let line = bound_line(&mut child);
    (child, line)
}

/// The JSON line a server started with its standard output piped prints once bound.
pub fn bound_line(child: &mut Child) -> serde_json::Value {
    let stdout = child.stdout.take().expect("the server's stdout piped");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the address line");
    serde_json::from_str(&line).unwrap_or_else(|err| panic!("address line {line:?}: {err}"))
}

/// The `http://ADDR` of a server's bound line.
pub fn url_of(line: &serde_json::Value) -> String {
    let address = line["listening"]
        .as_str()
        .expect("the address line's listening");
    format!("http://{address}")
}
