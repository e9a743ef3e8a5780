//! The error body: `{"error": {"type": "...", "message": "..."}}`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The body of every 4xx and 5xx answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[schema(example = json!({"error": {"type": "invalid_arguments", "message": "timeout: must be between 1 and 3600, got 0"}}))]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

/// What went wrong: a stable machine-readable type and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// A stable snake_case identifier, for example `outside_workspace` or `invalid_arguments`.
    #[serde(rename = "type")]
    pub error_type: String,
    /// A human-readable explanation naming what was wrong.
    pub message: String,
}

impl ErrorResponse {
    pub fn new(error_type: impl Into<String>, message: impl Into<String>) -> ErrorResponse {
        ErrorResponse {
            error: ErrorBody {
                error_type: error_type.into(),
                message: message.into(),
            },
        }
    }
}
