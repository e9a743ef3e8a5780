//! The names MCP tools reach the model under: `mcp__<server>__<tool>`, within what the model
//! APIs take (`^[a-zA-Z0-9_-]{1,64}$`).

use sha2::{Digest as _, Sha256};

/// The prefix of every MCP tool's name.
pub const PREFIX: &str = "mcp__";

/// The longest tool name the model APIs take.
const MAX: usize = 64;

/// `mcp__<server>__<tool>`: characters the APIs refuse become `_`; a name too long, or taken
/// already (`taken`), is cut and ends with a short hash of the full name.
pub fn exposed_name(server: &str, tool: &str, taken: impl Fn(&str) -> bool) -> String {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = format!("{PREFIX}{server}__{clean}");
    if name.len() <= MAX && !taken(&name) {
        return name;
    }
    let hash = hex::encode(&Sha256::digest(format!("{server}\0{tool}"))[..4]);
    let keep = MAX - hash.len() - 1;
    format!("{}_{hash}", &name[..keep.min(name.len())])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_model_apis() {
        let valid = |n: &str| {
            n.len() <= 64
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        assert_eq!(exposed_name("git", "status", |_| false), "mcp__git__status");
        let dotted = exposed_name("docs", "search.v2", |_| false);
        assert_eq!(dotted, "mcp__docs__search_v2");
        let long = exposed_name("srv", &"x".repeat(100), |_| false);
        assert!(valid(&long) && long.len() == 64, "{long}");
        let clash = exposed_name("docs", "search_v2", |n| n == dotted);
        assert!(
            valid(&clash) && clash != dotted && clash.starts_with("mcp__docs__search_v2_"),
            "{clash}"
        );
    }
}
