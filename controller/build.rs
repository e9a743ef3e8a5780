//! Tests that need what a plain machine lacks (a Docker engine, kubectl, Chromium, pinned
//! Python tools) run when their variable is set, and are otherwise ignored with their reason:
//! for each variable of `testkit::gates::GATES` this sets its cfg when it is set, and warns
//! when it is not, and probes for root and Landlock. `.ci/run` sets them all.

fn main() {
    for line in testkit::gates::instructions(env!("CARGO_PKG_NAME")) {
        println!("{line}");
    }
}
