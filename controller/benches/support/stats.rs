//! What a bench reports of its repeated timings.

/// The middle of `values` once sorted (of an even count, the upper of the two middle ones).
pub(crate) fn median<T: Copy + Ord>(mut values: Vec<T>) -> T {
    values.sort_unstable();
    values[values.len() / 2]
}
