//! The policy of a run from its settings: `allow-all`, or rules (a file's and the built-in
//! ones) then the classifier.

use std::sync::Arc;

use super::{AllowAll, Classifier, Pipeline, Policy, PolicyError, PolicySettings, load_rules};
use harness_models::{self, Model, ModelSpec, RetryPolicy};

/// Builds the policy; `model` and `spec` are the run's, which the classifier shares unless it
/// has its own, whose requests then pass `gates` too.
pub fn build_policy(
    settings: &PolicySettings,
    spec: &ModelSpec,
    model: &Arc<dyn Model>,
    gates: Option<&harness_models::gate::Gates>,
) -> Result<Box<dyn Policy>, PolicyError> {
    if settings.allow_all {
        return Ok(Box::new(AllowAll));
    }
    let file = settings.rules_file.as_deref();
    let rules = load_rules(file)?;
    let classifier = if settings.no_classifier {
        None
    } else {
        let (name, classifier_model) = match &settings.classifier_model {
            Some(name) => {
                let spec = ModelSpec {
                    name: name.clone(),
                    ..spec.clone()
                };
                let built = harness_models::build_gated(&spec, RetryPolicy::default(), gates)?;
                (name.clone(), built)
            }
            None => (spec.name.clone(), model.clone()),
        };
        Some(Classifier {
            model: classifier_model,
            model_name: name,
            timeout: settings.classifier_timeout,
        })
    };
    let description = format!(
        "rules ({}{} deny, {} ask, {} allow){}; asks settled by: {}",
        file.map(|f| format!("{} + built-in: ", f.display()))
            .unwrap_or_else(|| "built-in: ".to_owned()),
        rules.deny.len(),
        rules.ask.len(),
        rules.allow.len(),
        classifier
            .as_ref()
            .map(|c| format!(" then classifier {}", c.model_name))
            .unwrap_or_default(),
        settings.approve.describe()
    );
    Ok(Box::new(Pipeline {
        rules,
        classifier,
        description,
    }))
}
