//! Harbor's exception names, as its result files name a trial's failure: how a verifier
//! failed, and how a session stopped. The log records its own classes; only the files written
//! for Harbor speak Harbor's words.

use harness_log::{ErrorClass, VerifierFailure};

/// The exception Harbor files a verifier's failure under.
pub fn of_failure(failure: VerifierFailure) -> &'static str {
    match failure {
        VerifierFailure::Timeout => "VerifierTimeoutError",
        VerifierFailure::NoReward => "RewardFileNotFoundError",
        VerifierFailure::EmptyReward => "RewardFileEmptyError",
        VerifierFailure::BadReward | VerifierFailure::ParseError => "VerifierOutputParseError",
        // Not one of Harbor's: it grades with the reward given (0).
        VerifierFailure::Tampered => "RewardTamperingError",
    }
}

/// The exception Harbor files a session stopped by an error of `class` under.
pub fn of_stop(class: ErrorClass) -> &'static str {
    match class {
        ErrorClass::Model => "ApiError",
        ErrorClass::Infrastructure | ErrorClass::Sandbox => "RuntimeRequestError",
        ErrorClass::Interrupted => "CancelledError",
        ErrorClass::Limit => "AgentTimeoutError",
        ErrorClass::Tool | ErrorClass::Policy | ErrorClass::Internal => "HarnessError",
    }
}
