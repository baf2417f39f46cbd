//! Label selectors (`metav1.LabelSelector`) against an object's labels, as
//! `metav1.LabelSelectorAsSelector` builds them: `matchLabels` and `matchExpressions` all
//! hold (`In`, `NotIn`, `Exists`, `DoesNotExist`); an empty selector matches everything. A
//! missing (nil) selector, which matches nothing there, is the caller's to handle.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// Whether `labels` satisfy `selector`.
///
/// # Errors
/// The apimachinery reason for an invalid requirement: an unknown operator, an empty value
/// set for `In`/`NotIn`, or values for `Exists`/`DoesNotExist`.
pub(super) fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    let mut all = true;
    for (key, value) in selector.match_labels.iter().flatten() {
        all &= labels.get(key) == Some(value);
    }
    for requirement in selector.match_expressions.iter().flatten() {
        // Every requirement is checked, also after a mismatch, so an invalid one is an error
        // whatever the labels are.
        all &= requirement_holds(requirement, labels)?;
    }
    Ok(all)
}

fn requirement_holds(
    requirement: &LabelSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    let values = requirement.values.as_deref().unwrap_or_default();
    let value = labels.get(&requirement.key);
    let set_op = |holds: bool| {
        if values.is_empty() {
            Err("for 'in', 'notin' operators, values set can't be empty".to_owned())
        } else {
            Ok(holds)
        }
    };
    let exists_op = |holds: bool| {
        if values.is_empty() {
            Ok(holds)
        } else {
            Err("values set must be empty for exists and does not exist".to_owned())
        }
    };
    match requirement.operator.as_str() {
        "In" => set_op(value.is_some_and(|v| values.contains(v))),
        "NotIn" => set_op(value.is_none_or(|v| !values.contains(v))),
        "Exists" => exists_op(value.is_some()),
        "DoesNotExist" => exists_op(value.is_none()),
        other => Err(format!("{other:?} is not a valid label selector operator")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn selector(json: serde_json::Value) -> LabelSelector {
        serde_json::from_value(json).expect("selector")
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn empty_matches_everything_and_match_labels_all_hold() {
        let alive = labels(&[("signer.alive", "true"), ("tier", "root")]);
        assert_eq!(matches(&selector(json!({})), &alive), Ok(true));
        assert_eq!(matches(&selector(json!({})), &labels(&[])), Ok(true));
        let s = selector(json!({"matchLabels": {"signer.alive": "true"}}));
        assert_eq!(matches(&s, &alive), Ok(true));
        assert_eq!(
            matches(&s, &labels(&[("signer.alive", "false")])),
            Ok(false)
        );
        assert_eq!(matches(&s, &labels(&[])), Ok(false));
        let s = selector(json!({"matchLabels": {"signer.alive": "true", "tier": "leaf"}}));
        assert_eq!(matches(&s, &alive), Ok(false));
    }

    #[test]
    fn expressions() {
        let l = labels(&[("env", "prod")]);
        let expr = |op: &str, values: serde_json::Value| {
            selector(
                json!({"matchExpressions": [{"key": "env", "operator": op, "values": values}]}),
            )
        };
        assert_eq!(matches(&expr("In", json!(["prod", "qa"])), &l), Ok(true));
        assert_eq!(matches(&expr("In", json!(["qa"])), &l), Ok(false));
        assert_eq!(matches(&expr("NotIn", json!(["qa"])), &l), Ok(true));
        assert_eq!(matches(&expr("NotIn", json!(["prod"])), &l), Ok(false));
        assert_eq!(
            matches(&expr("NotIn", json!(["x"])), &labels(&[])),
            Ok(true)
        );
        assert_eq!(matches(&expr("Exists", json!(null)), &l), Ok(true));
        assert_eq!(matches(&expr("DoesNotExist", json!([])), &l), Ok(false));
        assert_eq!(
            matches(&expr("DoesNotExist", json!(null)), &labels(&[])),
            Ok(true)
        );
        // Invalid requirements are errors, whatever the labels.
        assert!(matches(&expr("In", json!([])), &l).is_err());
        assert!(matches(&expr("Exists", json!(["prod"])), &l).is_err());
        assert!(matches(&expr("Near", json!(["prod"])), &l).is_err());
        let both = selector(json!({"matchLabels": {"env": "qa"},
            "matchExpressions": [{"key": "env", "operator": "Bogus"}]}));
        assert!(matches(&both, &l).is_err());
    }
}
