//! The controller (binary `harness`): placeholder crate until its own issue lands.
