//! The initial manifest of a log (`workspace_snapshot.manifest`): the sandbox's entries, read
//! straight into a [`State`] as typed entries, and no more of them than a real one holds
//! ([`super::MAX_MANIFEST_ENTRIES`]).

use std::fmt;
use std::path::Path;

use sandbox_protocol::ManifestEntry;
use serde::de::{Error as _, SeqAccess, Visitor};

use super::State;
use crate::{ReplayError, blob};
use harness_log::{BlobRef, VersionRecord};

/// The manifest `reference` of the log in `dir`, as a state; refused past `max_entries`.
pub(super) fn read(
    dir: &Path,
    reference: &BlobRef,
    max_entries: usize,
) -> Result<State, ReplayError> {
    let bytes = blob(dir, reference)?;
    let mut json = serde_json::Deserializer::from_slice(&bytes);
    let state = serde::Deserializer::deserialize_seq(&mut json, Entries { max: max_entries })
        .and_then(|state| json.end().map(|()| state))
        .map_err(|err| ReplayError::Io(format!("the workspace manifest: {err}")))?;
    Ok(state)
}

/// Reads a manifest's entries one at a time into a state, counting them.
struct Entries {
    max: usize,
}

impl<'de> Visitor<'de> for Entries {
    type Value = State;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a list of manifest entries")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<State, A::Error> {
        let mut state = State::new();
        let mut n = 0usize;
        while let Some(entry) = seq.next_element::<ManifestEntry>()? {
            n += 1;
            if n > self.max {
                return Err(A::Error::custom(format!(
                    "more than {} entries (a crafted log?)",
                    self.max
                )));
            }
            if entry.path_b64.is_some() {
                return Err(A::Error::custom(format!(
                    "the path `{}` is not UTF-8: restore writes UTF-8 names only",
                    entry.path.escape_debug()
                )));
            }
            let version = entry.version;
            let record = VersionRecord {
                kind: version.kind,
                size: version.size,
                mode: version.mode,
                sha256: version.sha256,
                target: version.target,
            };
            state.insert(entry.path, record);
        }
        Ok(state)
    }
}
