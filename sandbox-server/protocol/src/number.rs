//! Whole numbers as JSON Schema counts them: `1660.0` is an integer there (a value, not a
//! spelling), so an argument documented as an integer takes it; a fraction, a negative or an
//! out-of-range number is refused with the field named by serde's path.

use serde::{Deserialize, Deserializer, de::Error};

fn whole<'de, D: Deserializer<'de>>(
    number: &serde_json::Number,
    max: u64,
) -> Result<u64, D::Error> {
    let value = number.as_u64().or_else(|| {
        number
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0)
            // Saturating: a larger whole number is refused below as too large.
            .map(|f| f as u64)
    });
    match value {
        Some(v) if v <= max => Ok(v),
        Some(_) => Err(D::Error::custom(format!(
            "expected a whole number no greater than {max}, got {number}"
        ))),
        None if number.as_f64().is_some_and(|f| f < 0.0) => Err(D::Error::custom(format!(
            "expected a whole number, not negative, got {number}"
        ))),
        None => Err(D::Error::custom(format!(
            "expected a whole number, got {number}"
        ))),
    }
}

/// An optional whole number up to `i64::MAX` (what `format: int64` allows): absent or `null`
/// is `None`.
pub fn option_u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    Option::<serde_json::Number>::deserialize(deserializer)?
        .map(|n| whole::<D>(&n, i64::MAX as u64))
        .transpose()
}

/// An optional `u32`: absent or `null` is `None`.
pub fn option_u32<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u32>, D::Error> {
    Option::<serde_json::Number>::deserialize(deserializer)?
        .map(|n| whole::<D>(&n, u64::from(u32::MAX)).map(|v| v as u32))
        .transpose()
}

/// A `u16` (a terminal's rows or columns).
pub fn u16<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u16, D::Error> {
    let number = serde_json::Number::deserialize(deserializer)?;
    whole::<D>(&number, u64::from(u16::MAX)).map(|v| v as u16)
}

/// A whole number up to `i64::MAX` (what `format: int64` allows).
pub fn u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    whole::<D>(
        &serde_json::Number::deserialize(deserializer)?,
        i64::MAX as u64,
    )
}
