//! Tests that need third-party tools (schemathesis, openapi-python-client, Chromium, pinned
//! Python tools) run when their variable is set, and are otherwise ignored with their reason:
//! for each variable of `testkit::gates::GATES` this sets its cfg when it is set, and warns
//! when it is not; it probes for root and Landlock too. `.ci/run` installs the tools and sets
//! the variables.

fn main() {
    for line in testkit::gates::instructions(env!("CARGO_PKG_NAME")) {
        println!("{line}");
    }
}
