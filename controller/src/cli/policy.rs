//! `harness policy eval`: the policy pipeline over labelled examples, in the seed's form.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::exit_code;
use anyhow::Context;
use harness_judge::{self, Classifier, Decision, Pipeline, Policy};
use harness_log::Verdict;
use harness_models::{self, ModelSpec, RetryPolicy};
use sandbox_protocol::ToolInput;
use serde::Deserialize;
use serde_json::Value;

use super::PolicyCommand;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Example {
    request: String,
    tool: String,
    args: Value,
    /// `allow`, `ask` or `deny`; checked as it is read.
    expected: String,
    #[serde(default)]
    category: Option<String>,
}

pub(crate) async fn run(command: PolicyCommand) -> anyhow::Result<i32> {
    let PolicyCommand::Eval {
        file,
        model,
        base_url,
        policy,
        classifier_timeout,
    } = command;
    eval(
        &file,
        model,
        base_url,
        policy.as_deref(),
        classifier_timeout,
    )
    .await
}

async fn eval(
    file: &Path,
    model: Option<String>,
    base_url: Option<String>,
    policy_file: Option<&Path>,
    timeout: u64,
) -> anyhow::Result<i32> {
    let examples = load_examples(file)?;
    let classifier = match &model {
        Some(name) => Some(classifier(name, base_url, timeout)?),
        None => {
            eprintln!("no --model: the rules decide, and what they leave open is `ask`");
            eprintln!(
                "no workspace: read-only git commands are judged without their repository's config"
            );
            None
        }
    };
    let pipeline = Pipeline {
        rules: harness_judge::load_rules(policy_file)?,
        classifier,
        description: String::new(),
    };
    let mut by_category: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (example, input, expected) in &examples {
        let judgement = pipeline
            .decide(harness_judge::Call {
                request: &example.request,
                input,
                workspace: None,
            })
            .await;
        let agrees = judgement.decision.verdict() == *expected;
        println!(
            "{} {:5} {}  ({})",
            if agrees { "ok " } else { "NO " },
            judgement.decision.verdict().as_str(),
            subject(input),
            reason(&judgement)
        );
        let category = example.category.as_deref().unwrap_or("uncategorised");
        let entry = by_category.entry(category.to_owned()).or_default();
        entry.0 += u64::from(agrees);
        entry.1 += 1;
    }
    print_agreement(&by_category);
    Ok(exit_code::COMPLETED)
}

/// The labelled examples, one JSON object a line, with their calls parsed and their expected
/// verdicts; a bad line is named with its number.
fn load_examples(file: &Path) -> anyhow::Result<Vec<(Example, ToolInput, Verdict)>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut examples = Vec::new();
    for (idx, line) in text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
    {
        let place = format!("{}:{}", file.display(), idx + 1);
        let example: Example = serde_json::from_str(line).with_context(|| place.clone())?;
        let Ok(expected) = example.expected.parse::<Verdict>() else {
            anyhow::bail!(
                "{place}: expected must be allow, ask or deny, not `{}`",
                example.expected
            );
        };
        let input = ToolInput::parse(&example.tool, example.args.clone()).map_err(|err| {
            anyhow::anyhow!("{place}: the args of a `{}` call: {err}", example.tool)
        })?;
        examples.push((example, input, expected));
    }
    Ok(examples)
}

fn classifier(name: &str, base_url: Option<String>, timeout: u64) -> anyhow::Result<Classifier> {
    let spec = ModelSpec {
        name: name.to_owned(),
        base_url,
        reasoning_effort: name.starts_with("openai/").then(|| "low".to_owned()),
        web_search: false,
        price: None,
        max_tokens: 1024,
        thinking_budget: None,
    };
    Ok(Classifier {
        model: harness_models::build(&spec, RetryPolicy::default())?,
        model_name: name.to_owned(),
        timeout: Duration::from_secs(timeout.max(1)),
    })
}

/// What the call is about: a command, or a tool and the file it names.
fn subject(input: &ToolInput) -> String {
    let path = match input {
        ToolInput::Bash(args) => return args.cmd.clone(),
        ToolInput::Other { args, .. } => args.get("path").and_then(Value::as_str),
        input => input.path(),
    };
    format!("{} {}", input.name(), path.unwrap_or_default())
}

fn reason(judgement: &harness_judge::Judgement) -> String {
    match &judgement.decision {
        Decision::Allow => judgement
            .rule
            .clone()
            .unwrap_or_else(|| judgement.source.as_str().to_owned()),
        Decision::Ask(reason) | Decision::Deny(reason) => reason.clone(),
    }
}

fn print_agreement(by_category: &BTreeMap<String, (u64, u64)>) {
    println!();
    for (category, (agree, total)) in by_category {
        println!(
            "{category:<20} {agree:>3}/{total:<3} {:>5.1}%",
            100.0 * *agree as f64 / *total as f64
        );
    }
    let (agree, total) = by_category
        .values()
        .fold((0, 0), |(a, t), (x, y)| (a + x, t + y));
    println!(
        "{:<20} {agree:>3}/{total:<3} {:>5.1}%",
        "all",
        100.0 * agree as f64 / total.max(1) as f64
    );
}
