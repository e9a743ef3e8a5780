//! Sizes on the command line: `64MiB`, `1GiB`, `512k`, or plain bytes.

/// Parses a size: a whole number of bytes, optionally followed by a unit (`k`, `m`, `g`, `t`,
/// with or without `B`/`iB`, any case; all are powers of 1024).
pub(super) fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let digits = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => {
            return Err(format!(
                "expected a size such as 64MiB, 1GiB or 1048576 (bytes), got `{text}`"
            ));
        }
    };
    let value: u64 = number.parse().map_err(|_| {
        format!("expected a size such as 64MiB, 1GiB or 1048576 (bytes), got `{text}`")
    })?;
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("`{text}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_take_units_or_bytes() {
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64m"), Ok(64 << 20));
        assert_eq!(parse_size("2 GB"), Ok(2 << 30));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("0"), Ok(0));
        for bad in [
            "",
            "MiB",
            "1.5GiB",
            "-1",
            "12 parsecs",
            "99999999999999999999",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert!(parse_size("99999999T").unwrap_err().contains("too large"));
    }
}
