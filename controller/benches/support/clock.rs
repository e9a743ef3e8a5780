//! Wall-clock times in milliseconds since the epoch: now, and an event's `ts`.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the epoch.
pub(crate) fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// An event's timestamp in milliseconds since the epoch.
pub(crate) fn ms_of(event: &serde_json::Value) -> u128 {
    humantime::parse_rfc3339_weak(event["ts"].as_str().unwrap().trim_end_matches('Z'))
        .unwrap()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis()
}
