//! The seed's compaction: the middle of a long history replaced by the model's summary.

use std::sync::Mutex;

use super::{Agent, SessionError, Totals};
use harness_log::{Compaction, Event, Purpose};
use harness_models::Message;

/// Messages kept verbatim at the end when compacting, as the seed.
const KEEP_RECENT: usize = 6;
const SUMMARY_REQUEST: &str =
    "Summarise the work so far. Keep decisions, file names and anything unresolved.";

impl Agent<'_> {
    /// The seed's compaction: keep the first two messages and the last few, replace the middle
    /// by the model's summary in `<summary_of_earlier_work>`. A tool result never leaves the
    /// call that asked for it; an empty summary leaves the history unchanged.
    pub(super) async fn compact(
        &self,
        messages: Vec<Message>,
        turn: u32,
        totals: &Mutex<Totals>,
    ) -> Result<Vec<Message>, SessionError> {
        let Some(split_at) = compaction_split(&messages) else {
            return Ok(messages);
        };
        let mut request: Vec<Message> = messages[..split_at].to_vec();
        request.push(Message::User {
            content: SUMMARY_REQUEST.to_owned(),
        });
        let summary = self
            .ask(&request, &[], turn, Purpose::Summary, totals)
            .await?;
        if summary.message.content.trim().is_empty() {
            return Ok(messages);
        }
        let compacted = compacted(&messages, split_at, &summary.message.content);
        let replaced = serde_json::to_value(&messages[2..split_at]).expect("messages serialize");
        let event = Compaction {
            summary: self.recorder.log.text(&summary.message.content)?,
            replaced: self.recorder.log.json_blob(&replaced)?,
            n_replaced: (split_at - 2) as u64,
            n_before: messages.len() as u64,
            n_after: compacted.len() as u64,
        };
        self.recorder.log.record(Event::Compaction(event)).await?;
        super::current(totals).n_compactions += 1;
        self.observer.compacted(messages.len(), compacted.len());
        Ok(compacted)
    }
}

/// Where the middle ends: the last `KEEP_RECENT` messages stay, moved back past any tool
/// results so none is separated from its call. `None` when there is no middle.
pub fn compaction_split(messages: &[Message]) -> Option<usize> {
    let mut split_at = messages
        .len()
        .saturating_sub(KEEP_RECENT)
        .max(2)
        .min(messages.len());
    while split_at < messages.len() && matches!(messages[split_at], Message::Tool { .. }) {
        split_at += 1;
    }
    (split_at > 2).then_some(split_at)
}

/// The history once compacted at `split_at` (from [`compaction_split`]): the first two
/// messages, the summary in `<summary_of_earlier_work>`, then the messages from `split_at` on.
/// A fork rebuilds a recorded compaction with it, so both read the same.
pub fn compacted(messages: &[Message], split_at: usize, summary: &str) -> Vec<Message> {
    let mut compacted: Vec<Message> = messages[..2].to_vec();
    compacted.push(Message::User {
        content: format!("<summary_of_earlier_work>\n{summary}\n</summary_of_earlier_work>"),
    });
    compacted.extend(messages[split_at..].iter().cloned());
    compacted
}
