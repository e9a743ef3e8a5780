//! `harness`: the agent harness.
fn main() {}
