//! The domain: the tool trait and registry, the built-in tools, the workspace boundary and
//! output capture. Nothing here knows about HTTP.

pub mod output;
pub mod registry;
pub mod tools;
pub mod workspace;

pub use registry::{Registry, Tool, ToolContext, ToolError, ToolLimits, Validate};
