//! A batch's charts, drawn by the static report's own chart code ([`harness_replay::charts`]) from
//! the grid, each served as a standalone SVG image (an `<img>`: no script can run in it).

use harness_replay::charts::{self, Bar, Chart, NAMES, Spread, Tone};

use crate::ViewError;
use crate::batch::{Cell, Grid};

/// The tool latency chart of `rows` ([`crate::latency`]), as an SVG document.
pub(crate) fn tool_latency(rows: &[Spread]) -> String {
    let chart = Chart {
        id: "tool-latency",
        title: "Tool latency (finished trials)",
        unit: "ms",
    };
    standalone(&charts::spreads(&chart, rows))
}

/// The chart `name` of `grid`, as an SVG document.
pub(crate) fn svg(grid: &Grid, name: &str) -> Result<String, ViewError> {
    let html = match name {
        "outcomes" => outcomes(grid, name),
        "per-task" => per_task(grid, name),
        "cost" => cost(grid, name),
        "duration" => duration(grid, name),
        "turns" => turns(grid, name),
        other => {
            return Err(ViewError::NotFound(format!(
                "no chart `{}`; the charts are {}",
                other.escape_debug(),
                NAMES.join(", ")
            )));
        }
    };
    Ok(standalone(&html))
}

/// Every trial of the grid, task by task.
fn cells(grid: &Grid) -> impl Iterator<Item = &Cell> {
    grid.rows.iter().flat_map(|r| &r.cells)
}

/// The trials that finished with a verdict: the ones whose cost, time and turns mean something.
fn done(grid: &Grid) -> impl Iterator<Item = &Cell> {
    cells(grid).filter(|c| matches!(c.state, "passed" | "failed"))
}

/// Passed, each failure class (largest first), then the trials not finished yet.
fn outcomes(grid: &Grid, id: &str) -> String {
    let mut bars = vec![bar("passed", grid.passed as f64, Tone::Good)];
    let mut failed: Vec<Bar> = grid
        .failures
        .iter()
        .map(|(class, n)| bar(class, *n as f64, Tone::Bad))
        .collect();
    charts::sort_desc(&mut failed);
    bars.extend(failed);
    let pending = grid.trials - grid.finished;
    if pending > 0 {
        bars.push(bar("not finished", pending as f64, Tone::Muted));
    }
    let chart = Chart {
        id,
        title: "Outcomes",
        unit: "trials",
    };
    charts::bars(&chart, &bars, None)
}

/// Each task's mean reward when any trial has one, else its pass rate; on a 0 to 1 scale.
fn per_task(grid: &Grid, id: &str) -> String {
    let rewarded = cells(grid).any(|c| c.reward.is_some());
    let mut bars: Vec<Bar> = grid
        .rows
        .iter()
        .filter(|r| r.finished > 0)
        .map(|r| {
            let value = if rewarded {
                r.mean_reward.unwrap_or(0.0)
            } else {
                r.passed as f64 / r.finished as f64
            };
            let tone = if value >= 1.0 {
                Tone::Good
            } else if value > 0.0 {
                Tone::Neutral
            } else {
                Tone::Bad
            };
            bar(&r.task, value, tone)
        })
        .collect();
    charts::sort_desc(&mut bars);
    let (title, unit) = if rewarded {
        ("Mean reward per task", "reward")
    } else {
        ("Pass rate per task", "trials passed (fraction)")
    };
    charts::bars(&Chart { id, title, unit }, &bars, Some(1.0))
}

/// How the finished trials' costs spread.
fn cost(grid: &Grid, id: &str) -> String {
    let costs: Vec<f64> = done(grid).filter_map(|c| c.cost).collect();
    let chart = Chart {
        id,
        title: "Cost per trial",
        unit: "$ per trial",
    };
    charts::histogram(&chart, &costs)
}

/// How the finished trials' durations spread, in seconds.
fn duration(grid: &Grid, id: &str) -> String {
    let seconds: Vec<f64> = done(grid)
        .filter_map(|c| c.duration_ms)
        .map(|ms| ms as f64 / 1000.0)
        .collect();
    let chart = Chart {
        id,
        title: "Duration per trial",
        unit: "seconds per trial",
    };
    charts::histogram(&chart, &seconds)
}

/// The model turns of each finished trial, most first.
fn turns(grid: &Grid, id: &str) -> String {
    let mut bars: Vec<Bar> = done(grid)
        .filter_map(|c| c.turns.map(|t| bar(&c.task_id, t as f64, Tone::Neutral)))
        .collect();
    charts::sort_desc(&mut bars);
    let chart = Chart {
        id,
        title: "Turns per trial",
        unit: "model turns",
    };
    charts::bars(&chart, &bars, None)
}

fn bar(label: &str, value: f64, tone: Tone) -> Bar {
    Bar {
        label: label.to_owned(),
        value,
        tip: format!("{label}: {}", charts::number(value)),
        tone,
    }
}

/// The `<svg>` of a report figure, alone (a figure's caption, when it has one, is dropped).
fn standalone(figure: &str) -> String {
    let start = figure.find("<svg").unwrap_or(0);
    let end = figure
        .rfind("</svg>")
        .map_or(figure.len(), |at| at + "</svg>".len());
    let svg = &figure[start..end];
    if svg.starts_with("<svg") {
        svg.to_owned()
    } else {
        // A chart with nothing to draw is a note: made an image too.
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"340\" height=\"40\"><text x=\"8\" y=\"24\" font-family=\"sans-serif\" font-size=\"13\">{}</text></svg>",
            harness_log::text::escape(&strip_tags(figure))
        )
    }
}

fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for c in html.chars() {
        match c {
            '<' => inside = true,
            '>' => inside = false,
            c if !inside => out.push(c),
            _ => {}
        }
    }
    out.trim().to_owned()
}
