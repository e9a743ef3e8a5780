//! A `GET /v1/processes` answer, read as the protocol's type (the streams bench and the
//! processes tests both count what still runs).

use sandbox_protocol::{ProcessListResponse, ProcessState};

/// How many of the processes started by id (`managed`) the answer `listing` says still run.
pub(crate) fn running(listing: &serde_json::Value) -> usize {
    let listing: ProcessListResponse =
        serde_json::from_value(listing.clone()).expect("a GET /v1/processes answer");
    listing
        .managed
        .iter()
        .filter(|process| process.state == ProcessState::Running)
        .count()
}
