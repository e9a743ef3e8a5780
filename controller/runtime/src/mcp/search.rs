//! `mcp__tool_search`: when the MCP tools' schemas would take more of the context than the
//! budget allows, the model gets this one tool instead. It finds tools by words of their names
//! and descriptions and loads the best ones: from the next turn on, the model has them.

use sandbox_protocol::ToolSpec;
use serde_json::{Value, json};

use super::{McpAnswer, McpTools, SEARCH_TOOL, failure};

/// The most tools one search loads.
const MOST: usize = 5;

pub(super) fn tool_spec() -> ToolSpec {
    ToolSpec {
        name: SEARCH_TOOL.to_owned(),
        description: "Find tools of the MCP servers by what they do (words of their names and descriptions). The best matches are loaded: from your next turn on you can call them by the names this returns.".to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {"query": {"type": "string", "description": "Words that describe the tool you need"}},
            "required": ["query"],
            "additionalProperties": false,
        }),
    }
}

/// How well `spec` matches the query's words: one point a word in its description, three in
/// its name.
fn score(spec: &ToolSpec, words: &[String]) -> usize {
    let name = spec.name.to_lowercase();
    let description = spec.description.to_lowercase();
    words
        .iter()
        .map(|w| {
            3 * usize::from(name.contains(w.as_str()))
                + usize::from(description.contains(w.as_str()))
        })
        .sum()
}

impl McpTools {
    pub(super) fn search(&self, args: &Value) -> McpAnswer {
        let Some(query) = args.get("query").and_then(Value::as_str) else {
            return failure("query: required, a string".to_owned());
        };
        let words: Vec<String> = query
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.len() > 1)
            .map(str::to_lowercase)
            .collect();
        let mut ranked: Vec<(usize, &ToolSpec)> = self
            .searchable
            .iter()
            .map(|spec| (score(spec, &words), spec))
            .filter(|(score, _)| *score > 0)
            .collect();
        ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
        let found: Vec<&ToolSpec> = ranked
            .into_iter()
            .take(MOST)
            .map(|(_, spec)| spec)
            .collect();
        if found.is_empty() {
            let names: Vec<&str> = self.searchable.iter().map(|s| s.name.as_str()).collect();
            return McpAnswer {
                failed: false,
                text: format!(
                    "No tool matches {query:?}. The MCP tools are: {}",
                    names.join(", ")
                ),
            };
        }
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        for spec in &found {
            if !loaded.iter().any(|l| l.name == spec.name) {
                loaded.push((*spec).clone());
            }
        }
        let lines: Vec<String> = found
            .iter()
            .map(|spec| format!("- {}: {}", spec.name, spec.description))
            .collect();
        McpAnswer {
            failed: false,
            text: format!(
                "Loaded {} tools; call them from your next turn:\n{}",
                found.len(),
                lines.join("\n")
            ),
        }
    }
}
