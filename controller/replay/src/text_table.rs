//! Text tables of fixed columns, as the report and the comparison print them: each cell padded
//! to its column's width (text to the left, numbers to the right), the cells one space apart,
//! and after two spaces a last column of any width, left as it is.

use std::fmt::Display;
use std::io::Write;

/// A column of a text table: its width, and the side its cells keep to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Column {
    /// Text: padded on the right to the width.
    Left(usize),
    /// A number: padded on the left to the width.
    Right(usize),
}

/// Writes one line of a table: `cells` under `columns`, then `tail` (the free last column),
/// when there is one, two spaces on.
pub(crate) fn write_line(
    out: &mut dyn Write,
    columns: &[Column],
    cells: &[&dyn Display],
    tail: Option<&str>,
) -> std::io::Result<()> {
    let mut line = String::new();
    for (at, (column, cell)) in columns.iter().zip(cells).enumerate() {
        if at > 0 {
            line.push(' ');
        }
        line.push_str(&match *column {
            Column::Left(width) => format!("{cell:<width$}"),
            Column::Right(width) => format!("{cell:>width$}"),
        });
    }
    if let Some(tail) = tail {
        line.push_str(&format!("  {tail}"));
    }
    writeln!(out, "{line}")
}
