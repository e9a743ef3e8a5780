//! Writing blocks as Markdown, or as one self-contained HTML page.

use std::io::Write;

use super::Block;
use super::steps::{StepBar, StepTimes, duration};
use harness_log::text::escape;

pub(super) fn write_md(out: &mut dyn Write, block: &Block) -> std::io::Result<()> {
    writeln!(out, "### {} · {}\n", block.title, block.seq)?;
    writeln!(out, "<sub>{} · `{}`</sub>\n", block.ts, block.kind)?;
    for note in &block.notes {
        writeln!(out, "- {note}")?;
    }
    if !block.notes.is_empty() {
        writeln!(out)?;
    }
    for section in &block.sections {
        let fence = if section.body.contains("```") {
            "````"
        } else {
            "```"
        };
        writeln!(
            out,
            "**{}**\n\n{fence}{}\n{}\n{fence}\n",
            section.label,
            section.lang,
            section.body.trim_end_matches('\n')
        )?;
        if let Some(full) = &section.full {
            writeln!(out, "(full text: `{}`)\n", full.display())?;
        }
    }
    Ok(())
}

pub(super) fn write_html(
    out: &mut dyn Write,
    block: &Block,
    bar: Option<StepBar>,
) -> std::io::Result<()> {
    let rank = bar.and_then(|b| b.rank);
    writeln!(
        out,
        "<li class=\"event {}{}\" id=\"e{}\">",
        block.kind,
        if rank.is_some() { " slow" } else { "" },
        block.seq
    )?;
    let mark = rank
        .map(|r| format!(" <span class=\"slow-mark\">slowest #{}</span>", r + 1))
        .unwrap_or_default();
    writeln!(
        out,
        "<div class=\"head\"><a class=\"seq\" href=\"#e{0}\">{0}</a> <span class=\"title\">{1}</span> <time>{2}</time>{mark}</div>",
        block.seq,
        inline_code(&block.title),
        escape(&block.ts)
    )?;
    if let Some(bar) = bar {
        writeln!(
            out,
            "<div class=\"steptime\" title=\"time since the previous event\"><span class=\"track\"><span class=\"bar\" style=\"width:{:.1}%\"></span></span><span class=\"ms\">{}</span></div>",
            100.0 * bar.fraction,
            duration(bar.ms)
        )?;
    }
    for note in &block.notes {
        writeln!(out, "<div class=\"note\">{}</div>", inline_code(note))?;
    }
    for section in &block.sections {
        let body = if section.lang == "diff" {
            diff_html(&section.body)
        } else {
            escape(&section.body)
        };
        let full = section
            .full
            .as_ref()
            .map(|path| {
                format!(
                    " <span class=\"full\">full: {}</span>",
                    escape(&path.display().to_string())
                )
            })
            .unwrap_or_default();
        let open = if section.body.lines().count() <= 12 {
            " open"
        } else {
            ""
        };
        writeln!(
            out,
            "<details{open}><summary>{}{full}</summary><pre class=\"{}\">{body}</pre></details>",
            escape(&section.label),
            section.lang
        )?;
    }
    writeln!(out, "</li>")
}

fn diff_html(diff: &str) -> String {
    diff.lines()
        .map(|line| {
            let class = match line.chars().next() {
                Some('+') if !line.starts_with("+++") => "add",
                Some('-') if !line.starts_with("---") => "del",
                Some('@') => "hunk",
                _ => "ctx",
            };
            format!("<span class=\"{class}\">{}</span>", escape(line))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The slowest steps, linked, for the top of the page.
fn slowest_html(times: &StepTimes) -> String {
    if times.slowest.is_empty() {
        return String::new();
    }
    let items: Vec<String> = times
        .slowest
        .iter()
        .map(|s| {
            format!(
                "<li><a href=\"#e{0}\">step {0}</a>: {1}, {2}</li>",
                s.seq,
                escape(&s.what),
                duration(s.ms)
            )
        })
        .collect();
    format!(
        "<section class=\"slowest\"><h2>Slowest steps</h2><ol>{}</ol></section>\n",
        items.concat()
    )
}

pub(super) fn html_head(title: &str, times: &StepTimes) -> String {
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{0}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1d1d1f; }}
main {{ max-width: 64rem; margin: 0 auto; padding: 1rem 1.5rem; }}
h1 {{ font-size: 1.3rem; }}
ol.timeline {{ list-style: none; padding-left: 1.2rem; border-left: 3px solid #d0d0d6; }}
li.event {{ margin: 0 0 .9rem; position: relative; }}
li.event::before {{ content: ""; position: absolute; left: -1.72rem; top: .35rem; width: .7rem; height: .7rem; border-radius: 50%; background: #8e8e93; }}
li.model_response::before {{ background: #0b6bcb; }} li.tool_call::before, li.tool_result::before {{ background: #0a7a35; }}
li.workspace_changed::before {{ background: #8a5a00; }} li.error::before {{ background: #b3261e; }}
li.policy_decision::before {{ background: #6e3fb3; }} li.session_finished::before, li.session_started::before {{ background: #1d1d1f; }}
.head {{ font-weight: 600; }} .seq {{ color: #6e6e73; text-decoration: none; font-family: ui-monospace, monospace; margin-right: .4rem; }}
time {{ color: #6e6e73; font-weight: 400; font-size: .85em; margin-left: .5rem; }}
.outcome {{ font-weight: 600; margin: .5em 0 1em; }} .note {{ color: #3a3a3c; }} code {{ background: #f2f2f7; padding: 0 .2em; border-radius: 3px; }} .warn {{ color: #b3261e; }} .full {{ color: #6e6e73; font-size: .85em; }}
pre {{ background: #f5f5f7; padding: .6rem; overflow: auto; max-height: 32rem; font-size: 12.5px; white-space: pre-wrap; }}
.add {{ color: #0a7a35; }} .del {{ color: #b3261e; }} .hunk {{ color: #6e3fb3; }}
.steptime {{ display: flex; align-items: center; gap: .5rem; font-size: .8em; color: #6e6e73; }}
.steptime .track {{ display: inline-block; width: 20rem; height: .55rem; background: #eef1f6; }}
.steptime .bar {{ display: block; height: 100%; min-width: 1px; background: #7fa3d9; }}
li.slow .steptime .bar {{ background: #c0392b; }} li.slow .steptime .ms {{ color: #b3261e; font-weight: 600; }}
.slow-mark {{ background: #fde2df; color: #b3261e; border-radius: .3rem; padding: 0 .35rem; font-size: .8em; margin-left: .5rem; }}
.slowest {{ background: #fff7f6; border: 1px solid #f3c7c1; padding: .3rem 1rem; margin-bottom: 1rem; }}
.slowest h2 {{ font-size: 1rem; margin: .4rem 0; }}
</style></head>
<body><main><h1>{0}</h1>
{1}<ol class="timeline">
"#,
        escape(title),
        slowest_html(times)
    )
}

/// Escaped text with its `code` spans (Markdown's backticks, as titles and notes are written)
/// set as `<code>`; an unmatched backtick stays as it is.
fn inline_code(text: &str) -> String {
    let parts: Vec<&str> = text.split('`').collect();
    if parts.len() < 3 {
        return escape(text);
    }
    let mut out = String::new();
    let pairs = (parts.len() - 1) / 2;
    for (i, part) in parts.iter().enumerate() {
        match i {
            0 => out.push_str(&escape(part)),
            _ if i <= pairs * 2 && i % 2 == 1 => {
                out.push_str("<code>");
                out.push_str(&escape(part));
            }
            _ if i <= pairs * 2 => {
                out.push_str("</code>");
                out.push_str(&escape(part));
            }
            _ => {
                out.push('`');
                out.push_str(&escape(part));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::inline_code;

    #[test]
    fn backticks_become_code_and_the_rest_is_escaped() {
        assert_eq!(
            inline_code("run `ls <x>` now"),
            "run <code>ls &lt;x&gt;</code> now"
        );
        assert_eq!(inline_code("a `b` c `d"), "a <code>b</code> c `d");
        assert_eq!(inline_code("no code"), "no code");
    }
}
