//! `harness policy eval`: the policy pipeline over labelled examples, in the seed's form.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use controller::cli::PolicyCommand;
use controller::exit_code;
use controller::llm::{self, ModelSpec, RetryPolicy};
use controller::policy::{self, Classifier, Decision, Pipeline, Policy};
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Example {
    request: String,
    tool: String,
    args: Value,
    expected: String,
    #[serde(default)]
    category: Option<String>,
}

pub(crate) async fn run(command: PolicyCommand) -> i32 {
    let PolicyCommand::Eval {
        file,
        model,
        base_url,
        policy,
        classifier_timeout,
    } = command;
    match eval(
        &file,
        model,
        base_url,
        policy.as_deref(),
        classifier_timeout,
    )
    .await
    {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            exit_code::ERROR
        }
    }
}

async fn eval(
    file: &PathBuf,
    model: Option<String>,
    base_url: Option<String>,
    policy_file: Option<&Path>,
    timeout: u64,
) -> anyhow::Result<i32> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut examples = Vec::new();
    for (idx, line) in text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
    {
        let example: Example = serde_json::from_str(line)
            .with_context(|| format!("{}:{}", file.display(), idx + 1))?;
        if !matches!(example.expected.as_str(), "allow" | "ask" | "deny") {
            anyhow::bail!(
                "{}:{}: expected must be allow, ask or deny, not `{}`",
                file.display(),
                idx + 1,
                example.expected
            );
        }
        examples.push(example);
    }
    let classifier = match &model {
        Some(name) => {
            let spec = ModelSpec {
                name: name.clone(),
                base_url,
                reasoning_effort: name.starts_with("openai/").then(|| "low".to_owned()),
                web_search: false,
                price: None,
                max_tokens: 1024,
                thinking_budget: None,
            };
            Some(Classifier {
                model: llm::build(&spec, RetryPolicy::default())?,
                model_name: name.clone(),
                timeout: Duration::from_secs(timeout.max(1)),
            })
        }
        None => None,
    };
    let pipeline = Pipeline {
        rules: policy::load_rules(policy_file)?,
        classifier,
        description: String::new(),
    };
    if model.is_none() {
        eprintln!("no --model: the rules decide, and what they leave open is `ask`");
    }
    let mut by_category: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for example in &examples {
        let judgement = pipeline
            .decide(&example.request, &example.tool, &example.args)
            .await;
        let (decision, reason) = match &judgement.decision {
            Decision::Allow => (
                "allow",
                judgement
                    .rule
                    .clone()
                    .map(|rule| format!("rule {rule}"))
                    .unwrap_or_else(|| judgement.source.clone()),
            ),
            Decision::Ask(reason) => ("ask", reason.clone()),
            Decision::Deny(reason) => ("deny", reason.clone()),
        };
        let agrees = decision == example.expected;
        let subject = match example.tool.as_str() {
            "bash" => example.args["cmd"].as_str().unwrap_or_default().to_owned(),
            tool => format!(
                "{tool} {}",
                example.args["path"].as_str().unwrap_or_default()
            ),
        };
        println!(
            "{} {decision:5} {subject}  ({reason})",
            if agrees { "ok " } else { "NO " }
        );
        let entry = by_category
            .entry(
                example
                    .category
                    .clone()
                    .unwrap_or_else(|| "uncategorised".to_owned()),
            )
            .or_default();
        entry.0 += u64::from(agrees);
        entry.1 += 1;
    }
    println!();
    for (category, (agree, total)) in &by_category {
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
    Ok(exit_code::COMPLETED)
}
