//! How long each step of a session took, for the HTML transcript's time bars: a first pass over
//! the log keeps each event's time since the event before it (the model's latency before a
//! reply, a command's run before its result) and the slowest few steps.

use std::path::Path;

use crate::metrics::millis;
use crate::{ReplayError, events};
use harness_log::Event;

/// How many of the slowest steps are marked and listed.
pub(super) const SLOWEST: usize = 3;

/// One of the slowest steps.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Slow {
    pub(super) seq: u64,
    pub(super) ms: u64,
    /// What the event was, in a few words.
    pub(super) what: String,
}

/// Every step's time; the slowest first in `slowest`.
#[derive(Debug, Default)]
pub(super) struct StepTimes {
    /// (seq, ms) in log order.
    times: Vec<(u64, u64)>,
    longest: u64,
    pub(super) slowest: Vec<Slow>,
}

/// A step's bar: its time, its share of the longest step's, and its rank when among the slowest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct StepBar {
    pub(super) ms: u64,
    pub(super) fraction: f64,
    pub(super) rank: Option<usize>,
}

impl StepTimes {
    /// Adds the step `seq` that took `ms`.
    fn push(&mut self, seq: u64, ms: u64, event: &Event) {
        self.times.push((seq, ms));
        self.longest = self.longest.max(ms);
        let slower = self.slowest.len() < SLOWEST || self.slowest.last().is_some_and(|s| ms > s.ms);
        if ms > 0 && slower {
            self.slowest.push(Slow {
                seq,
                ms,
                what: describe(event),
            });
            // Stable: of equal steps the first stays ahead.
            self.slowest.sort_by_key(|s| std::cmp::Reverse(s.ms));
            self.slowest.truncate(SLOWEST);
        }
    }

    /// The bar of step `seq`.
    pub(super) fn bar(&self, seq: u64) -> Option<StepBar> {
        let at = self.times.binary_search_by_key(&seq, |&(s, _)| s).ok()?;
        let ms = self.times[at].1;
        Some(StepBar {
            ms,
            fraction: if self.longest == 0 {
                0.0
            } else {
                ms as f64 / self.longest as f64
            },
            rank: self.slowest.iter().position(|s| s.seq == seq),
        })
    }
}

/// Reads the log once for every step's time.
pub(super) fn measure(dir: &Path) -> Result<StepTimes, ReplayError> {
    let mut steps = StepTimes::default();
    let mut previous = None;
    for envelope in events(dir, |_| {})? {
        let envelope = envelope?;
        let at = millis(&envelope.ts);
        let ms = match (previous, at) {
            (Some(before), Some(now)) => now.saturating_sub(before) as u64,
            _ => 0,
        };
        previous = at.or(previous);
        steps.push(envelope.seq, ms, &envelope.event);
    }
    // A log's seq only grows, so `bar` can search; a log that says otherwise is searched as is.
    steps.times.sort_by_key(|&(seq, _)| seq);
    Ok(steps)
}

/// An event in a few words: its kind, and the tool or turn it was for.
fn describe(event: &Event) -> String {
    match event {
        Event::ModelResponse(response) => format!("model reply, turn {}", response.turn),
        Event::ToolResult(result) => format!("result of `{}`", result.name),
        Event::ToolCall(call) => format!("call of `{}`", call.name),
        Event::PolicyDecision(decision) => format!("policy decision on `{}`", decision.tool),
        other => other.kind().replace('_', " "),
    }
}

/// A time as people read it: `840 ms`, `12.3 s`.
pub(super) fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use harness_log::{ErrorClass, ErrorEvent};

    fn error() -> Event {
        Event::Error(ErrorEvent {
            class: ErrorClass::Internal,
            message: String::new(),
            call_id: None,
        })
    }

    #[test]
    fn the_three_slowest_steps_are_ranked_and_every_bar_is_scaled_to_the_longest() {
        let mut steps = StepTimes::default();
        for (seq, ms) in [
            (0, 0),
            (1, 50),
            (2, 400),
            (3, 10),
            (4, 800),
            (5, 400),
            (6, 90),
        ] {
            steps.push(seq, ms, &error());
        }
        let ranked: Vec<(u64, u64)> = steps.slowest.iter().map(|s| (s.seq, s.ms)).collect();
        assert_eq!(ranked, [(4, 800), (2, 400), (5, 400)]);
        assert_eq!(steps.slowest[0].what, "error");
        let bar = steps.bar(2).unwrap();
        assert_eq!((bar.ms, bar.fraction, bar.rank), (400, 0.5, Some(1)));
        assert_eq!(steps.bar(6).unwrap().rank, None);
        assert_eq!(steps.bar(0).unwrap().fraction, 0.0);
        assert_eq!(steps.bar(9), None);
        assert_eq!(duration(840), "840 ms");
        assert_eq!(duration(12_345), "12.3 s");
    }
}
