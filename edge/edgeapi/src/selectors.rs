//! Label and field selectors, as the API server applies them to list and watch requests
//! (`labels.Parse` and `fields.ParseSelector`): label requirements `k=v`, `k==v`, `k!=v`,
//! `k in (a,b)`, `k notin (a,b)`, `k` and `!k`, joined by commas; field requirements
//! `path=v`, `path==v`, `path!=v` on the object's fields (`metadata.name`, `spec.nodeName`,
//! `status.phase`, ...).

use std::collections::BTreeMap;

use serde_json::Value;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Label {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector (empty: everything).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Label>);

/// A parsed field selector (empty: everything): `(path, value, equal)` requirements.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, String, bool)>);

/// Splits `text` at the commas outside parentheses.
fn split_top(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// The values of a set requirement: `(a, b)`.
fn set_values(text: &str) -> Result<Vec<String>, String> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesized list of values, found {text:?}"))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses `text` (see the module docs).
    ///
    /// # Errors
    /// The API server's kind of message for a selector it cannot parse.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for part in split_top(text) {
            let requirement = if let Some(key) = part.strip_prefix('!') {
                Label::DoesNotExist(key.trim().to_owned())
            } else if let Some((key, rest)) = part.split_once(" notin ") {
                Label::NotIn(key.trim().to_owned(), set_values(rest)?)
            } else if let Some((key, rest)) = part.split_once(" in ") {
                Label::In(key.trim().to_owned(), set_values(rest)?)
            } else if let Some((key, value)) = part.split_once("!=") {
                Label::NotEquals(key.trim().to_owned(), value.trim().to_owned())
            } else if let Some((key, value)) = part.split_once("==") {
                Label::Equals(key.trim().to_owned(), value.trim().to_owned())
            } else if let Some((key, value)) = part.split_once('=') {
                Label::Equals(key.trim().to_owned(), value.trim().to_owned())
            } else if part.contains(['<', '>', '(', ')', ' ']) {
                return Err(format!("unable to parse requirement: {part:?}"));
            } else {
                Label::Exists(part.to_owned())
            };
            out.push(requirement);
        }
        Ok(Self(out))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Label::Equals(k, v) => labels.get(k) == Some(v),
            Label::NotEquals(k, v) => labels.get(k) != Some(v),
            Label::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Label::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Label::Exists(k) => labels.contains_key(k),
            Label::DoesNotExist(k) => !labels.contains_key(k),
        })
    }
}

/// The value at a dotted field path of `object`, as text (missing: empty).
fn field(object: &Value, path: &str) -> String {
    let mut at = object;
    for part in path.split('.') {
        match at.get(part) {
            Some(next) => at = next,
            None => return String::new(),
        }
    }
    match at {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl FieldSelector {
    /// Parses `text` (see the module docs).
    ///
    /// # Errors
    /// A requirement that is not `path=value`, `path==value` or `path!=value`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for part in split_top(text) {
            let (path, value, equal) = if let Some((p, v)) = part.split_once("!=") {
                (p, v, false)
            } else if let Some((p, v)) = part.split_once("==") {
                (p, v, true)
            } else if let Some((p, v)) = part.split_once('=') {
                (p, v, true)
            } else {
                return Err(format!("invalid field selector: {part:?}"));
            };
            out.push((path.trim().to_owned(), value.trim().to_owned(), equal));
        }
        Ok(Self(out))
    }

    /// Whether `object` satisfies every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        self.0
            .iter()
            .all(|(path, value, equal)| (field(object, path) == *value) == *equal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn label_selectors_match_as_the_api_servers_do() -> Result<(), String> {
        let web = labels(&[("app", "web"), ("tier", "front")]);
        let db = labels(&[("app", "db")]);
        let cases = [
            ("", true, true),
            ("app=web", true, false),
            ("app==web,tier", true, false),
            ("app!=web", false, true),
            ("app in (web, db),!tier", false, true),
            ("app notin (db)", true, false),
            ("tier", true, false),
        ];
        for (text, on_web, on_db) in cases {
            let selector = LabelSelector::parse(text)?;
            assert_eq!(selector.matches(&web), on_web, "{text} on web");
            assert_eq!(selector.matches(&db), on_db, "{text} on db");
        }
        assert!(LabelSelector::parse("a in b").is_err());
        Ok(())
    }

    #[test]
    fn field_selectors_read_the_objects_fields() -> Result<(), String> {
        let pod = serde_json::json!({ "metadata": { "name": "web", "namespace": "shop" },
            "spec": { "nodeName": "edge-a" }, "status": { "phase": "Running" } });
        assert!(FieldSelector::parse("metadata.name=web,spec.nodeName==edge-a")?.matches(&pod));
        assert!(!FieldSelector::parse("status.phase!=Running")?.matches(&pod));
        assert!(FieldSelector::parse("status.podIP=")?.matches(&pod));
        assert!(FieldSelector::parse("nonsense").is_err());
        Ok(())
    }
}
