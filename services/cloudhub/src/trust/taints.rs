//! The taints a joining node's Node is created with (`JoinRequest.register_with_taints`, the
//! edge's `edged.registerWithTaints`; the kubelet's `--register-with-taints`, which applies
//! when the kubelet creates its Node only). They are checked as the API server checks a
//! Node's `spec.taints` (Kubernetes `validateNodeTaints`: key a qualified name, value a label
//! value, a known effect, unique by key and effect), so a join that passes is never refused
//! by the API server after its CSR was recorded.

use k8s_openapi::api::core::v1::Taint;
use verge_proto::hub::Taint as RequestedTaint;

use super::TrustError;

/// At most this many taints per join.
pub const MAX_REGISTER_TAINTS: usize = 32;

/// The effects Kubernetes knows (`TaintEffect`).
const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// Longest name part of a qualified name, and longest label value.
const MAX_NAME_LEN: usize = 63;

/// Longest DNS-1123 subdomain (the prefix of a qualified name).
const MAX_SUBDOMAIN_LEN: usize = 253;

/// `requested` as the Node's `spec.taints` (an empty value becomes no value, as the kubelet
/// registers it).
///
/// # Errors
/// [`TrustError::BadTaint`] naming the first invalid taint and why, or more than
/// [`MAX_REGISTER_TAINTS`].
pub fn node_taints(requested: &[RequestedTaint]) -> Result<Vec<Taint>, TrustError> {
    if requested.len() > MAX_REGISTER_TAINTS {
        return Err(TrustError::BadTaint {
            reason: format!(
                "{} taints, at most {MAX_REGISTER_TAINTS} are allowed",
                requested.len()
            ),
        });
    }
    let mut taints: Vec<Taint> = Vec::with_capacity(requested.len());
    for (index, taint) in requested.iter().enumerate() {
        let bad = |why: String| TrustError::BadTaint {
            reason: format!("taint {index} (key {:?}): {why}", taint.key),
        };
        qualified_name(&taint.key).map_err(|why| bad(format!("key {why}")))?;
        label_value(&taint.value).map_err(|why| bad(format!("value {:?} {why}", taint.value)))?;
        if !EFFECTS.contains(&taint.effect.as_str()) {
            return Err(bad(format!(
                "effect {:?} is not NoSchedule, PreferNoSchedule or NoExecute",
                taint.effect
            )));
        }
        if taints
            .iter()
            .any(|t| t.key == taint.key && t.effect == taint.effect)
        {
            return Err(bad(format!(
                "a taint with this key and effect {} comes earlier (taints are unique by key and effect)",
                taint.effect
            )));
        }
        taints.push(Taint {
            key: taint.key.clone(),
            value: Some(taint.value.clone()).filter(|v| !v.is_empty()),
            effect: taint.effect.clone(),
            time_added: None,
        });
    }
    Ok(taints)
}

/// Kubernetes `IsQualifiedName`: `[<DNS-1123 subdomain>/]<name>`, the name at most 63
/// characters of `[A-Za-z0-9._-]` that begin and end alphanumeric.
fn qualified_name(key: &str) -> Result<(), &'static str> {
    let name = match key.split_once('/') {
        None => key,
        Some((prefix, name)) => {
            if !is_dns_subdomain(prefix) {
                return Err(
                    "prefix must be a DNS subdomain (lower case [a-z0-9.-], at most 253 characters)",
                );
            }
            name
        }
    };
    if name.is_empty() || name.len() > MAX_NAME_LEN || !is_name(name) {
        return Err(
            "must be a qualified name: an optional DNS subdomain and '/', then 1 to 63 characters of [A-Za-z0-9._-] that begin and end alphanumeric",
        );
    }
    Ok(())
}

/// Kubernetes `IsValidLabelValue`: empty, or at most 63 characters of `[A-Za-z0-9._-]` that
/// begin and end alphanumeric.
fn label_value(value: &str) -> Result<(), &'static str> {
    if value.is_empty() || (value.len() <= MAX_NAME_LEN && is_name(value)) {
        Ok(())
    } else {
        Err("must be empty or 1 to 63 characters of [A-Za-z0-9._-] that begin and end alphanumeric")
    }
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Kubernetes `IsDNS1123Subdomain`: at most 253 characters, dot-separated labels of
/// `[a-z0-9-]` that begin and end alphanumeric.
fn is_dns_subdomain(name: &str) -> bool {
    let label = |l: &str| {
        let bytes = l.as_bytes();
        matches!((bytes.first(), bytes.last()), (Some(f), Some(e))
            if (f.is_ascii_lowercase() || f.is_ascii_digit())
                && (e.is_ascii_lowercase() || e.is_ascii_digit()))
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
    };
    !name.is_empty() && name.len() <= MAX_SUBDOMAIN_LEN && name.split('.').all(label)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: &str) -> RequestedTaint {
        RequestedTaint {
            key: key.to_owned(),
            value: value.to_owned(),
            effect: effect.to_owned(),
        }
    }

    #[test]
    fn valid_taints_become_node_taints() {
        let taints = node_taints(&[
            taint("dedicated", "edge", "NoSchedule"),
            taint("example.com/gpu", "", "PreferNoSchedule"),
            taint("example.com/gpu", "x", "NoExecute"),
            taint("a", &"v".repeat(63), "NoSchedule"),
            taint(
                &format!("{}/{}", "p".repeat(253), "n".repeat(63)),
                "",
                "NoSchedule",
            ),
        ])
        .expect("valid");
        assert_eq!(taints.len(), 5);
        assert_eq!(taints[0].key, "dedicated");
        assert_eq!(taints[0].value.as_deref(), Some("edge"));
        assert_eq!(taints[0].effect, "NoSchedule");
        assert_eq!(taints[1].value, None, "an empty value is no value");
        assert!(node_taints(&[]).expect("none").is_empty());
    }

    #[test]
    fn invalid_taints_are_refused_with_the_reason() {
        let refused = |t: RequestedTaint, needle: &str| {
            let error = node_taints(&[taint("ok", "", "NoSchedule"), t]).expect_err("refused");
            let text = error.to_string();
            assert!(matches!(error, TrustError::BadTaint { .. }), "{text}");
            assert!(text.contains("taint 1"), "{text}");
            assert!(text.contains(needle), "{needle}: {text}");
        };
        refused(taint("", "", "NoSchedule"), "key must be a qualified name");
        refused(
            taint("a b", "", "NoSchedule"),
            "key must be a qualified name",
        );
        refused(
            taint("-a", "", "NoSchedule"),
            "key must be a qualified name",
        );
        refused(taint(&"k".repeat(64), "", "NoSchedule"), "qualified name");
        refused(taint("Example.com/k", "", "NoSchedule"), "prefix");
        refused(taint("/k", "", "NoSchedule"), "prefix");
        refused(taint("a/b/c", "", "NoSchedule"), "qualified name");
        refused(
            taint(&format!("{}/k", "p".repeat(254)), "", "NoSchedule"),
            "prefix",
        );
        refused(taint("k", &"v".repeat(64), "NoSchedule"), "value");
        refused(taint("k", "a b", "NoSchedule"), "value");
        refused(taint("k", "a.", "NoSchedule"), "value");
        refused(taint("k", "", "Never"), "effect \"Never\"");
        refused(taint("k", "", ""), "effect");
        refused(
            taint("ok", "other", "NoSchedule"),
            "unique by key and effect",
        );
        let many: Vec<_> = (0..33)
            .map(|i| taint(&format!("k{i}"), "", "NoSchedule"))
            .collect();
        let error = node_taints(&many).expect_err("too many");
        assert!(error.to_string().contains("at most 32"), "{error}");
        assert_eq!(node_taints(&many[..32]).expect("32 are fine").len(), 32);
    }
}
