//! The system prompt: the base prompt, the workspace's AGENTS.md, then the skills catalogue,
//! each read through the sandbox API, in the seed's format.

use sandbox_protocol::EntryKind;

use crate::sandbox::{SandboxClient, SandboxError};
use harness_log::text::escape;

/// The seed's base prompt.
pub const BASE_PROMPT: &str = "You are a coding agent. Use the tools to complete the user's task in the \
current directory, then reply with a short summary of what you did.";

const AGENTS_FILE: &str = "AGENTS.md";
const SKILLS_DIR: &str = ".agents/skills";

/// The most of AGENTS.md that goes into the prompt (and is read at all), in bytes; a longer
/// file is cut there, with a warning. A workspace is someone else's: a sparse file of a
/// gigabyte must cost nothing.
pub const AGENTS_MAX_BYTES: usize = 32 * 1024;
/// The most of a SKILL.md read: its frontmatter is at its top.
const SKILL_FILE_MAX_BYTES: usize = 16 * 1024;
/// The most skills in the catalogue; the rest are left out, with a warning.
pub const MAX_SKILLS: usize = 64;
/// The longest description a skill may give (the Agent Skills spec's limit), in characters.
const DESCRIPTION_MAX_CHARS: usize = 1024;

/// A skill found under `.agents/skills/*/SKILL.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    /// Relative to the workspace root, e.g. `.agents/skills/x/SKILL.md`.
    pub location: String,
}

/// The prompt, with warnings about skills that break the Agent Skills spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemPrompt {
    pub text: String,
    pub skills: Vec<Skill>,
    pub warnings: Vec<String>,
}

pub async fn build(
    sandbox: &SandboxClient,
    workspace_root: &str,
) -> Result<SystemPrompt, SandboxError> {
    let mut warnings = Vec::new();
    let context = match sandbox.get_file(AGENTS_FILE, AGENTS_MAX_BYTES).await? {
        Some(head) => {
            if head.truncated() {
                warnings.push(format!(
                    "{AGENTS_FILE} is {} bytes: the prompt holds its first {AGENTS_MAX_BYTES}",
                    head.size
                ));
            }
            let path = format!("{}/{AGENTS_FILE}", workspace_root.trim_end_matches('/'));
            format!(
                "<project_instructions path=\"{}\">\n{}\n</project_instructions>",
                escape(&path),
                String::from_utf8_lossy(&head.bytes).trim()
            )
        }
        None => String::new(),
    };
    let (skills, skill_warnings) = find_skills(sandbox).await?;
    warnings.extend(skill_warnings);
    let sections = [BASE_PROMPT.to_owned(), context, format_skills(&skills)];
    let text = sections
        .into_iter()
        .filter(|section| !section.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    Ok(SystemPrompt {
        text,
        skills,
        warnings,
    })
}

async fn find_skills(sandbox: &SandboxClient) -> Result<(Vec<Skill>, Vec<String>), SandboxError> {
    let mut skills = Vec::new();
    let mut warnings = Vec::new();
    let Some(listing) = sandbox
        .list_dir(SKILLS_DIR)
        .await
        .or_else(not_a_dir_is_none)?
    else {
        return Ok((skills, warnings));
    };
    // Sorted by name, as the seed's sorted glob.
    let folders: Vec<_> = listing
        .entries
        .iter()
        .filter(|entry| matches!(entry.kind, EntryKind::Dir | EntryKind::Symlink))
        .collect();
    if folders.len() > MAX_SKILLS {
        warnings.push(format!(
            "{SKILLS_DIR} has {} folders: the catalogue holds the first {MAX_SKILLS}",
            folders.len()
        ));
    }
    for entry in folders.into_iter().take(MAX_SKILLS) {
        let location = format!("{SKILLS_DIR}/{}/SKILL.md", entry.name);
        let bytes = match sandbox.get_file(&location, SKILL_FILE_MAX_BYTES).await {
            Ok(Some(head)) => head.bytes,
            Ok(None) => continue,
            // A symlink leading outside, or a SKILL.md that is not a file: not a skill.
            Err(SandboxError::Api {
                status: 403,
                message,
                ..
            }) => {
                warnings.push(format!("skipping {location}: {message}"));
                continue;
            }
            Err(err) => return Err(err),
        };
        let meta = read_frontmatter(&String::from_utf8_lossy(&bytes));
        let Some(description) = meta
            .iter()
            .find(|(key, _)| key == "description")
            .map(|(_, v)| v.clone())
            .filter(|d| !d.is_empty())
        else {
            warnings.push(format!(
                "skipping {location}: its frontmatter has no description"
            ));
            continue;
        };
        let name = meta
            .iter()
            .find(|(key, _)| key == "name")
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| entry.name.clone());
        warnings.extend(
            spec_problems(&name, &description, &entry.name)
                .into_iter()
                .map(|problem| format!("{location}: {problem}")),
        );
        skills.push(Skill {
            name,
            // Past the spec's limit (warned above) a description is cut.
            description: description.chars().take(DESCRIPTION_MAX_CHARS).collect(),
            location,
        });
    }
    Ok((skills, warnings))
}

fn not_a_dir_is_none<T>(err: SandboxError) -> Result<Option<T>, SandboxError> {
    match err {
        SandboxError::Api { status: 403, .. } => Ok(None),
        other => Err(other),
    }
}

/// The `key: value` lines between a file's opening `---` markers, as the seed reads them.
pub fn read_frontmatter(text: &str) -> Vec<(String, String)> {
    let mut lines = text.lines();
    if lines.next().map(str::trim) != Some("---") {
        return Vec::new();
    }
    let mut meta = Vec::new();
    for line in lines {
        if line.trim() == "---" {
            return meta;
        }
        if let Some((key, value)) = line.split_once(':') {
            let value = value.trim().trim_matches(|c| c == '"' || c == '\'');
            meta.push((key.trim().to_owned(), value.to_owned()));
        }
    }
    Vec::new()
}

/// What breaks the Agent Skills spec: name of 1 to 64 characters of `a-z0-9-`, matching its
/// folder; a description of at most 1024 characters.
pub fn spec_problems(name: &str, description: &str, folder: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if name.is_empty() || name.chars().count() > 64 {
        problems.push(format!("name `{name}` must be 1 to 64 characters"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        problems.push(format!(
            "name `{name}` may use only lowercase letters, digits and hyphens"
        ));
    }
    if name != folder {
        problems.push(format!(
            "name `{name}` does not match its folder `{folder}`"
        ));
    }
    if description.chars().count() > 1024 {
        problems.push(format!(
            "description is {} characters, over the limit of 1024",
            description.chars().count()
        ));
    }
    problems
}

/// The seed's `<available_skills>` block; empty without skills.
pub fn format_skills(skills: &[Skill]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let entries: Vec<String> = skills
        .iter()
        .map(|skill| {
            format!(
                "  <skill>\n    <name>{}</name>\n    <description>{}</description>\n    <location>{}</location>\n  </skill>",
                escape(&skill.name),
                escape(&skill.description),
                escape(&skill.location)
            )
        })
        .collect();
    format!(
        "The following skills provide specialized instructions for specific tasks.\n\
         Use the read_file tool to load a skill's SKILL.md when the task matches its description.\n\
         Resolve relative paths in a skill against the skill's folder.\n\n\
         <available_skills>\n{}\n</available_skills>",
        entries.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontmatter_as_the_seed_reads_it() {
        let text = "---\nname: evaluate-image-classifier\ndescription: \"Evaluate: a model.\"\n---\n# Body\n";
        assert_eq!(
            read_frontmatter(text),
            vec![
                ("name".to_owned(), "evaluate-image-classifier".to_owned()),
                ("description".to_owned(), "Evaluate: a model.".to_owned())
            ]
        );
        assert_eq!(read_frontmatter("# no frontmatter\n"), Vec::new());
        assert_eq!(
            read_frontmatter("---\nname: x\n"),
            Vec::new(),
            "unterminated"
        );
    }

    #[test]
    fn skills_block_matches_the_seed() {
        let skills = [Skill {
            name: "evaluate-image-classifier".to_owned(),
            description: "Evaluate a trained image classifier on held-out images. Use when asked for accuracy or example predictions.".to_owned(),
            location: ".agents/skills/evaluate-image-classifier/SKILL.md".to_owned(),
        }];
        let expected = "The following skills provide specialized instructions for specific tasks.
Use the read_file tool to load a skill's SKILL.md when the task matches its description.
Resolve relative paths in a skill against the skill's folder.

<available_skills>
  <skill>
    <name>evaluate-image-classifier</name>
    <description>Evaluate a trained image classifier on held-out images. Use when asked for accuracy or example predictions.</description>
    <location>.agents/skills/evaluate-image-classifier/SKILL.md</location>
  </skill>
</available_skills>";
        assert_eq!(format_skills(&skills), expected);
    }

    #[test]
    fn spec_problems_are_named() {
        assert_eq!(
            spec_problems("good-name", "ok", "good-name"),
            Vec::<String>::new()
        );
        let problems = spec_problems("Bad_Name", &"x".repeat(1025), "folder");
        assert_eq!(problems.len(), 3, "{problems:?}");
    }
}
