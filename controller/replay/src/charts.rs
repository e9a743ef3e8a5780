//! Inline SVG charts for the HTML reports: pure functions from figures to a `<figure>` holding
//! one `<svg>`, drawn by hand (no script, no external file). Every text is escaped; every bar
//! carries a `<title>` tooltip with its exact figures.

use std::fmt::Write;

use harness_log::text::escape;

/// A chart's name and labels.
#[derive(Debug, Clone, Copy)]
pub struct Chart<'a> {
    /// Names the figure (`chart-{id}`); a plain word.
    pub id: &'a str,
    pub title: &'a str,
    /// What the values measure, shown under the axis (`seconds`, `$`).
    pub unit: &'a str,
}

/// How a bar is coloured: by what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    Good,
    Bad,
    Neutral,
    Muted,
}

impl Tone {
    fn fill(self) -> &'static str {
        match self {
            Tone::Good => "#2e8540",
            Tone::Bad => "#c0392b",
            Tone::Neutral => "#3b6fb6",
            Tone::Muted => "#9a9aa0",
        }
    }
}

/// One bar of a bar chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    pub value: f64,
    /// Its tooltip: the exact figures.
    pub tip: String,
    pub tone: Tone,
}

/// One bin of a histogram: the values in `[lo, hi)` (the last bin includes `hi`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bin {
    pub lo: f64,
    pub hi: f64,
    pub count: usize,
}

/// One row of a spread chart: a distribution as its median, 95th percentile and maximum.
#[derive(Debug, Clone, PartialEq)]
pub struct Spread {
    pub label: String,
    /// How many values it summarises.
    pub n: u64,
    pub p50: f64,
    pub p95: f64,
    pub max: f64,
}

/// Bars shown at most; the rest are counted under the chart.
pub const MAX_BARS: usize = 100;
/// The charts of a batch's report and of the viewer's batch page, by the `id` each is drawn
/// with (`chart-{id}` in the page).
pub const NAMES: &[&str] = &[
    "outcomes",
    "per-task",
    "cost",
    "duration",
    "tool-latency",
    "turns",
];
/// Bins a histogram has at most.
pub const MAX_BINS: usize = 10;

const FONT: &str = "font-family=\"system-ui,sans-serif\" font-size=\"12\" fill=\"#1d1d1f\"";
/// Horizontal charts: where labels end, where bars start and how wide they may grow.
const LABEL_END: f64 = 164.0;
const BARS_AT: f64 = 170.0;
const BARS_WIDTH: f64 = 340.0;
const ROW: f64 = 18.0;
const TOP: f64 = 30.0;
/// Characters of a label shown; the whole label is in the tooltip.
const LABEL_CHARS: usize = 26;

/// A number as short as it can be and still read right: `1234`, `12.3`, `1.23`, `0.0123`.
pub fn number(value: f64) -> String {
    let size = value.abs();
    let text = if size >= 100.0 || size == 0.0 {
        format!("{value:.0}")
    } else if size >= 10.0 {
        format!("{value:.1}")
    } else if size >= 1.0 {
        format!("{value:.2}")
    } else if size >= 0.01 {
        format!("{value:.3}")
    } else {
        format!("{value:.4}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// Sorts bars by value, largest first, then by label.
pub fn sort_desc(bars: &mut [Bar]) {
    bars.sort_by(|a, b| {
        b.value
            .total_cmp(&a.value)
            .then_with(|| a.label.cmp(&b.label))
    });
}

/// Splits the finite `values` into at most [`MAX_BINS`] bins of equal width from their least
/// to their greatest (about the square root of their number); one bin when they are all equal.
pub fn bins(values: &[f64]) -> Vec<Bin> {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let (Some(lo), Some(hi)) = (
        finite.iter().copied().reduce(f64::min),
        finite.iter().copied().reduce(f64::max),
    ) else {
        return Vec::new();
    };
    let k = if hi > lo {
        ((finite.len() as f64).sqrt().ceil() as usize).clamp(1, MAX_BINS)
    } else {
        1
    };
    let width = (hi - lo) / k as f64;
    let mut bins: Vec<Bin> = (0..k)
        .map(|i| Bin {
            lo: lo + width * i as f64,
            hi: if i + 1 == k {
                hi
            } else {
                lo + width * (i + 1) as f64
            },
            count: 0,
        })
        .collect();
    for value in finite {
        let at = if width > 0.0 {
            (((value - lo) / width) as usize).min(k - 1)
        } else {
            0
        };
        bins[at].count += 1;
    }
    bins
}

fn open(out: &mut String, chart: &Chart<'_>, width: f64, height: f64) {
    let title = escape(chart.title);
    let id = escape(chart.id);
    let _ = write!(
        out,
        "<figure class=\"chart\" id=\"chart-{id}\"><svg xmlns=\"http://www.w3.org/2000/svg\" \
         class=\"chart\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" \
         role=\"img\" aria-label=\"{title}\" {FONT}>\
         <rect width=\"{width}\" height=\"{height}\" fill=\"#fff\"/>\
         <text x=\"8\" y=\"18\" font-size=\"14\" font-weight=\"600\">{title}</text>"
    );
}

fn close(out: &mut String) {
    out.push_str("</svg></figure>\n");
}

/// A chart that has nothing to show says so.
fn empty(chart: &Chart<'_>) -> String {
    note(chart, "no data")
}

/// A chart with a line of text instead of a plot.
fn note(chart: &Chart<'_>, text: &str) -> String {
    let mut out = String::new();
    open(&mut out, chart, 360.0, 56.0);
    let _ = write!(
        out,
        "<text x=\"8\" y=\"42\" fill=\"#6e6e73\">{}</text>",
        escape(text)
    );
    close(&mut out);
    out
}

fn label(text: &str) -> String {
    if text.chars().count() > LABEL_CHARS {
        let head: String = text.chars().take(LABEL_CHARS - 1).collect();
        escape(&format!("{head}…"))
    } else {
        escape(text)
    }
}

/// A horizontal bar per item, in the order given, scaled to `scale` (or the largest value);
/// each labelled on the left, its value on the right. Past [`MAX_BARS`] the rest are counted.
pub fn bars(chart: &Chart<'_>, bars: &[Bar], scale: Option<f64>) -> String {
    if bars.is_empty() {
        return empty(chart);
    }
    let shown = &bars[..bars.len().min(MAX_BARS)];
    let largest = shown.iter().map(|b| b.value).fold(0.0, f64::max);
    let scale = scale.unwrap_or(largest).max(largest);
    let rows = shown.len() as f64 + if bars.len() > shown.len() { 1.0 } else { 0.0 };
    let height = TOP + rows * ROW + 34.0;
    let mut out = String::new();
    open(&mut out, chart, 600.0, height);
    for (i, bar) in shown.iter().enumerate() {
        let y = TOP + i as f64 * ROW;
        let width = if scale > 0.0 {
            (bar.value.max(0.0) / scale * BARS_WIDTH).max(1.0)
        } else {
            1.0
        };
        let _ = write!(
            out,
            "<g class=\"bar\"><title>{tip}</title>\
             <text x=\"{LABEL_END}\" y=\"{ty}\" text-anchor=\"end\">{label}</text>\
             <rect x=\"{BARS_AT}\" y=\"{y}\" width=\"{width:.1}\" height=\"13\" fill=\"{fill}\"/>\
             <text x=\"{vx:.1}\" y=\"{ty}\">{value}</text></g>",
            tip = escape(&bar.tip),
            ty = y + 11.0,
            label = label(&bar.label),
            fill = bar.tone.fill(),
            vx = BARS_AT + width + 4.0,
            value = number(bar.value),
        );
    }
    if bars.len() > shown.len() {
        let _ = write!(
            out,
            "<text x=\"{BARS_AT}\" y=\"{}\" fill=\"#6e6e73\">… and {} more (see the table)</text>",
            TOP + shown.len() as f64 * ROW + 11.0,
            bars.len() - shown.len()
        );
    }
    axis(&mut out, chart, TOP + rows * ROW, scale);
    close(&mut out);
    out
}

/// A chart's two axis lines, meeting at (`left`, `bottom`): along the bottom to `right`, and up
/// the left side to `top`.
fn axis_lines(out: &mut String, left: f64, top: f64, right: f64, bottom: f64) {
    let _ = write!(
        out,
        "<line x1=\"{left}\" y1=\"{bottom}\" x2=\"{right}\" y2=\"{bottom}\" stroke=\"#8e8e93\"/>\
         <line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{bottom}\" stroke=\"#8e8e93\"/>"
    );
}

/// The value axis under a horizontal chart: a line from 0 to `scale`, and the unit.
fn axis(out: &mut String, chart: &Chart<'_>, y: f64, scale: f64) {
    let end = BARS_AT + BARS_WIDTH;
    axis_lines(out, BARS_AT, TOP - 4.0, end, y);
    let _ = write!(
        out,
        "<text x=\"{BARS_AT}\" y=\"{ty}\" text-anchor=\"middle\" font-size=\"10\">0</text>\
         <text x=\"{end}\" y=\"{ty}\" text-anchor=\"middle\" font-size=\"10\">{max}</text>\
         <text x=\"{mid}\" y=\"{uy}\" text-anchor=\"middle\" font-size=\"11\" fill=\"#6e6e73\">{unit}</text>",
        ty = y + 12.0,
        max = number(scale),
        mid = BARS_AT + BARS_WIDTH / 2.0,
        uy = y + 26.0,
        unit = escape(chart.unit),
    );
}

/// A histogram of `values`: a column per [`bins`] bin, its count above it, the bins' edges
/// under it.
pub fn histogram(chart: &Chart<'_>, values: &[f64]) -> String {
    // One value everywhere (every task cost $0) is no distribution: say it in words.
    if let [first, rest @ ..] = values
        && !rest.is_empty()
        && rest.iter().all(|v| v == first)
    {
        let text = format!("all {} at {} {}", values.len(), number(*first), chart.unit);
        return note(chart, &text);
    }
    let bins = bins(values);
    if bins.is_empty() {
        return empty(chart);
    }
    let total: usize = bins.iter().map(|b| b.count).sum();
    let (left, top, plot_w, plot_h) = (48.0, 34.0, 400.0, 150.0);
    let most = bins.iter().map(|b| b.count).max().unwrap_or(1).max(1) as f64;
    let column = plot_w / bins.len() as f64;
    let bottom = top + plot_h;
    let mut out = String::new();
    open(&mut out, chart, left + plot_w + 24.0, bottom + 46.0);
    for (i, bin) in bins.iter().enumerate() {
        let h = bin.count as f64 / most * plot_h;
        let x = left + column * i as f64;
        let _ = write!(
            out,
            "<g class=\"bar\"><title>{lo} to {hi} {unit}: {n} of {total}</title>\
             <rect x=\"{rx:.1}\" y=\"{ry:.1}\" width=\"{rw:.1}\" height=\"{h:.1}\" fill=\"#3b6fb6\"/>\
             <text x=\"{cx:.1}\" y=\"{ny:.1}\" text-anchor=\"middle\" font-size=\"11\">{n}</text></g>",
            lo = number(bin.lo),
            hi = number(bin.hi),
            unit = escape(chart.unit),
            n = bin.count,
            rx = x + 1.0,
            ry = bottom - h,
            rw = (column - 2.0).max(1.0),
            cx = x + column / 2.0,
            ny = bottom - h - 3.0,
        );
    }
    // Every edge when they fit, else every other one (and the last).
    let step = if bins.len() > 6 { 2 } else { 1 };
    let edges = bins.iter().map(|b| b.lo).chain(bins.last().map(|b| b.hi));
    for (i, edge) in edges.enumerate() {
        if i % step == 0 || i == bins.len() {
            let _ = write!(
                out,
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">{}</text>",
                left + column * i as f64,
                bottom + 13.0,
                number(edge)
            );
        }
    }
    axis_lines(&mut out, left, top, left + plot_w, bottom);
    let _ = write!(
        out,
        "<text x=\"{tx}\" y=\"{bottom}\" text-anchor=\"end\" font-size=\"10\">0</text>\
         <text x=\"{tx}\" y=\"{top_y}\" text-anchor=\"end\" font-size=\"10\">{most}</text>\
         <text x=\"{tx}\" y=\"{mid_y}\" text-anchor=\"end\" font-size=\"11\" fill=\"#6e6e73\">tasks</text>\
         <text x=\"{ux}\" y=\"{uy}\" text-anchor=\"middle\" font-size=\"11\" fill=\"#6e6e73\">{unit}</text>",
        tx = left - 4.0,
        top_y = top + 8.0,
        mid_y = top + plot_h / 2.0,
        ux = left + plot_w / 2.0,
        uy = bottom + 32.0,
        unit = escape(chart.unit),
    );
    close(&mut out);
    out
}

/// A row per distribution, in the order given, on one scale: the median as a solid bar, the
/// 95th percentile as a paler one behind it, the maximum as a tick; the figures on the right.
pub fn spreads(chart: &Chart<'_>, rows: &[Spread]) -> String {
    if rows.is_empty() {
        return empty(chart);
    }
    let scale = rows.iter().map(|r| r.max).fold(0.0, f64::max).max(1.0);
    let x = |v: f64| BARS_AT + v.max(0.0) / scale * BARS_WIDTH;
    let height = TOP + rows.len() as f64 * ROW + 34.0;
    let mut out = String::new();
    open(&mut out, chart, 760.0, height);
    for (i, row) in rows.iter().enumerate() {
        let y = TOP + i as f64 * ROW;
        let figures = format!(
            "p50 {} · p95 {} · max {}",
            number(row.p50),
            number(row.p95),
            number(row.max)
        );
        let _ = write!(
            out,
            "<g class=\"bar\"><title>{name}: {n} calls; {figures} {unit}</title>\
             <text x=\"{LABEL_END}\" y=\"{ty}\" text-anchor=\"end\">{label}</text>\
             <rect x=\"{BARS_AT}\" y=\"{y}\" width=\"{w95:.1}\" height=\"13\" fill=\"#a9c1e6\"/>\
             <rect x=\"{BARS_AT}\" y=\"{y}\" width=\"{w50:.1}\" height=\"13\" fill=\"#3b6fb6\"/>\
             <line x1=\"{mx:.1}\" y1=\"{y}\" x2=\"{mx:.1}\" y2=\"{y2}\" stroke=\"#c0392b\" stroke-width=\"2\"/>\
             <text x=\"{tx}\" y=\"{ty}\">{figures} ({n})</text></g>",
            name = escape(&row.label),
            n = row.n,
            unit = escape(chart.unit),
            ty = y + 11.0,
            label = label(&row.label),
            w95 = (x(row.p95) - BARS_AT).max(1.0),
            w50 = (x(row.p50) - BARS_AT).max(1.0),
            mx = x(row.max),
            y2 = y + 13.0,
            tx = BARS_AT + BARS_WIDTH + 8.0,
        );
    }
    axis(&mut out, chart, TOP + rows.len() as f64 * ROW, scale);
    close(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHART: Chart<'static> = Chart {
        id: "test",
        title: "Test <chart> & co",
        unit: "s",
    };

    fn bar(label: &str, value: f64) -> Bar {
        Bar {
            label: label.to_owned(),
            value,
            tip: format!("{label}: {value}"),
            tone: Tone::Neutral,
        }
    }

    #[test]
    fn a_histograms_bins_hold_every_value_once() {
        let values: Vec<f64> = (0..37).map(|i| f64::from(i * i % 23) / 3.0).collect();
        let bins = bins(&values);
        assert_eq!(bins.iter().map(|b| b.count).sum::<usize>(), values.len());
        assert!(bins.len() <= MAX_BINS && bins.len() > 1);
        assert_eq!(bins[0].lo, 0.0);
        let greatest = values.iter().copied().fold(0.0, f64::max);
        assert_eq!(
            bins.last().unwrap().hi,
            greatest,
            "the last bin ends at the greatest"
        );
        for pair in bins.windows(2) {
            assert_eq!(pair[0].hi, pair[1].lo, "the bins tile the range");
        }
        let same = super::bins(&[2.5, 2.5, 2.5, f64::NAN]);
        assert_eq!(
            same,
            vec![Bin {
                lo: 2.5,
                hi: 2.5,
                count: 3
            }]
        );
        assert!(super::bins(&[]).is_empty());
    }

    #[test]
    fn a_bar_chart_has_a_bar_per_item_sorted_and_escaped() {
        let mut items: Vec<Bar> = (1..=7)
            .map(|i| bar(&format!("t{i}"), f64::from(i)))
            .collect();
        items.push(bar("<script>alert(1)</script>", 0.5));
        sort_desc(&mut items);
        assert_eq!(items[0].label, "t7");
        let svg = super::bars(&CHART, &items, None);
        assert_eq!(svg.matches("<g class=\"bar\">").count(), 8);
        assert_eq!(svg.matches("<title>").count(), 8);
        assert!(!svg.contains("<script>") && !svg.contains("<chart>"));
        assert!(svg.contains("&lt;script&gt;") && svg.contains("Test &lt;chart&gt; &amp; co"));
        assert!(svg.find(">t7<").unwrap() < svg.find(">t1<").unwrap());
        assert!(svg.starts_with("<figure class=\"chart\" id=\"chart-test\"><svg"));
    }

    #[test]
    fn a_long_chart_shows_the_first_bars_and_counts_the_rest() {
        let items: Vec<Bar> = (0..130).map(|i| bar(&format!("t{i}"), 1.0)).collect();
        let svg = super::bars(&CHART, &items, Some(2.0));
        assert_eq!(svg.matches("<g class=\"bar\">").count(), MAX_BARS);
        assert!(svg.contains("… and 30 more"));
        let long = bar(&"x".repeat(60), 1.0);
        let svg = super::bars(&CHART, &[long], None);
        assert!(svg.contains(&format!("{}…<", "x".repeat(LABEL_CHARS - 1))));
        assert!(svg.contains(&format!("<title>{}: 1</title>", "x".repeat(60))));
    }

    #[test]
    fn a_histogram_and_a_spread_chart_draw_their_data() {
        let svg = histogram(&CHART, &[1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(
            svg.matches("<g class=\"bar\">").count(),
            bins(&[1.0, 2.0, 3.0, 4.0, 5.0]).len()
        );
        assert!(svg.contains("of 5</title>"));
        let spread = Spread {
            label: "bash".to_owned(),
            n: 4,
            p50: 10.0,
            p95: 40.0,
            max: 80.0,
        };
        let svg = spreads(&CHART, &[spread]);
        assert!(svg.contains("bash: 4 calls; p50 10 · p95 40 · max 80 s"));
        assert!(empty(&CHART).contains("no data"));
        assert!(histogram(&CHART, &[]).contains("no data"));
        // Every task at $0 is said, not drawn as a range from 0 to 0.
        let same = histogram(&CHART, &[0.0, 0.0, 0.0]);
        assert!(
            same.contains("all 3 at 0 s") && !same.contains("class=\"bar\""),
            "{same}"
        );
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(number(1234.4), "1234");
        assert_eq!(number(12.34), "12.3");
        assert_eq!(number(1.0), "1");
        assert_eq!(number(0.01234), "0.012");
        assert_eq!(number(0.001234), "0.0012");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(-2.5), "-2.5");
    }
}
