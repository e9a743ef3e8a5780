//! `harness view`: the edge of `harness-view` (the folders, the address, the token).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;

/// Serve a live, read-only browser view of session and batch logs.
#[derive(Debug, clap::Args)]
pub(crate) struct ViewArgs {
    /// Log folders to view: a session's, a batch's, or folders of them [default: runs].
    #[arg(value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// The address to serve on. A non-loopback address needs --token-file.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8765")]
    listen: SocketAddr,
    /// A file holding the token (16 characters or more) every request must carry: opened once
    /// as `http://ADDR/?token=…`, it is kept in a cookie.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
}

pub(crate) async fn run(args: ViewArgs) -> anyhow::Result<i32> {
    let token = match &args.token_file {
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("--token-file {}", file.display()))?;
            Some(text.trim().to_owned())
        }
        None => None,
    };
    let dirs = if args.dirs.is_empty() {
        vec![PathBuf::from("runs")]
    } else {
        args.dirs
    };
    let viewer = harness_view::Viewer::bind(harness_view::Config {
        dirs,
        listen: args.listen,
        token: token.clone(),
    })
    .await?;
    let address = viewer.address()?;
    let login = if token.is_some() {
        " (open it once with ?token=<the token> added)"
    } else {
        ""
    };
    #[allow(clippy::print_stdout)]
    {
        println!("view: http://{address}/{login}");
        println!(
            "{} indexed; Ctrl-C stops the viewer",
            harness_log::text::plural(viewer.runs(), "run")
        );
    }
    tokio::select! {
        served = viewer.serve() => served?,
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(0)
}
