//! Blobs shared between logs: a fork's children and a subagent link their parent's instead of
//! fetching the same bytes again.

use std::path::Path;

/// Whether `name` is a blob's name: a sha256 in lowercase hex, exactly 64 characters. A name
/// that comes from elsewhere (a shared log, a sandbox's manifest or change list) is joined to a
/// `blobs/` folder only when it is one, so that `../x` or `/etc/passwd` never names a path.
pub fn is_sha256(name: &str) -> bool {
    name.len() == 64
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Makes `target` the blob `source`: a hard link, or a copy across file systems. A `target`
/// that exists already is left as it is (a blob's name is its hash).
pub fn link_or_copy(source: &Path, target: &Path) -> std::io::Result<()> {
    match std::fs::hard_link(source, target) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(err) if !source.is_file() => Err(err),
        Err(_) => std::fs::copy(source, target).map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_64_lowercase_hex_digits_name_a_blob() {
        let good = "a".repeat(60) + "09ef";
        assert!(is_sha256(&good));
        for bad in [
            String::new(),
            "../../../.env".to_owned(),
            "/etc/passwd".to_owned(),
            good.to_uppercase(),
            good[1..].to_owned(),
            good.clone() + "0",
            "../".to_owned() + &good[3..],
            "g".repeat(64),
            "é".repeat(32),
        ] {
            assert!(!is_sha256(&bad), "{bad:?}");
        }
    }
}
