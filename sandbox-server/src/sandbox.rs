//! The domain: the tool trait and registry, the built-in tools, the workspace boundary and
//! output capture. Nothing here knows about HTTP.

pub mod archive;
pub mod blobs;
pub mod fingerprint;
pub mod output;
pub mod registry;
pub mod snapshot;
pub mod tools;
pub mod workspace;

pub use registry::{Registry, Tool, ToolContext, ToolError, ToolLimits, Validate};
