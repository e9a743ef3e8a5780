//! What the operator gave that the harness cannot use: a task file, a flag, a hooks or MCP
//! servers file, a task folder. Each message names what was wrong (the file, the key, the
//! flag) and, where it helps, what to do instead; nothing here is the sandbox's or the model's
//! failure.

/// Input that cannot be used, said for the person who gave it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);

impl InputError {
    pub fn new(message: impl Into<String>) -> InputError {
        InputError(message.into())
    }

    /// The same refusal, said after `outer` (the file or the key it was found in).
    pub fn after(self, outer: impl std::fmt::Display) -> InputError {
        InputError(format!("{outer}: {}", self.0))
    }
}

/// Returns an [`InputError`] made as `format!` makes its message.
macro_rules! invalid {
    ($($arg:tt)*) => {
        return Err($crate::input::InputError(format!($($arg)*)).into())
    };
}
pub(crate) use invalid;
