//! Target `operations_json`: the spec of an `operations.kubeedge.io` job as JSON (any shape;
//! whoever may create jobs writes it), read as each of NodeUpgradeJob, ImagePrePullJob and
//! ConfigUpdateJob → fleetcontroller's checks (`verge_fleetcontroller::operations::validate`).
//!
//! Properties: nothing panics; a refusal names a field under `spec`; whatever is accepted and
//! may reach a node holds only the characters of its grammar (no shell syntax can pass): image
//! references and versions, node names, the pull Secret, configuration field paths; knobs are
//! in range (concurrency at least 1, timeout at most a day, tolerance from 0 to 1).

use verge_fleetcontroller::api::operations::{
    ConfigUpdateJobSpec, ImagePrePullJobSpec, NodeUpgradeJobSpec,
};
use verge_fleetcontroller::operations::validate::{
    self, Invalid, MAX_TIMEOUT_SECONDS, Selection, Targets,
};

/// Parses `data` and checks the properties above.
pub fn check(data: &[u8]) {
    let Ok(spec) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(s) = serde_json::from_value::<NodeUpgradeJobSpec>(spec.clone()) {
        match validate::upgrade(&s) {
            Ok(up) => {
                targets(&up.targets);
                let image = up.image.to_string();
                assert!(image_chars(&image), "image {image:?}");
                assert!(image.ends_with(&format!(":v{}", up.version)), "{image}");
            }
            Err(e) => refused(&e),
        }
    }
    if let Ok(s) = serde_json::from_value::<ImagePrePullJobSpec>(spec.clone()) {
        match validate::prepull(&s) {
            Ok(p) => {
                targets(&p.targets);
                assert!(!p.images.is_empty());
                for image in &p.images {
                    let text = image.to_string();
                    assert!(image_chars(&text), "image {text:?}");
                }
                if let Some((ns, name)) = &p.secret {
                    assert!(name_chars(ns) && name_chars(name), "secret {ns}/{name}");
                }
            }
            Err(e) => refused(&e),
        }
    }
    if let Ok(s) = serde_json::from_value::<ConfigUpdateJobSpec>(spec) {
        match validate::config_update(&s) {
            Ok(c) => {
                targets(&c.targets);
                for path in c.fields.keys() {
                    assert!(
                        path.iter().all(|p| p.chars().all(|c| c.is_ascii_alphanumeric())),
                        "path {path:?}"
                    );
                }
            }
            Err(e) => refused(&e),
        }
    }
}

fn refused(e: &Invalid) {
    assert!(e.field.starts_with("spec"), "{e}");
}

fn targets(t: &Targets) {
    assert!(t.concurrency >= 1);
    assert!(t.timeout.as_secs() >= 1 && t.timeout.as_secs() <= MAX_TIMEOUT_SECONDS.unsigned_abs());
    assert!((0.0..=1.0).contains(&t.failure_tolerate));
    if let Selection::Names(names) = &t.selection {
        assert!(!names.is_empty());
        assert!(names.iter().all(|n| name_chars(n)), "{names:?}");
    }
}

/// The characters of an image reference: `[A-Za-z0-9._:/@+-]` (`+` separates the parts of a
/// digest's algorithm in the distribution grammar, e.g. `sha256+b64u:`).
fn image_chars(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '@' | '+' | '-')
        })
}

/// The characters of a Kubernetes name: `[a-z0-9.-]`.
fn name_chars(s: &str) -> bool {
    !s.is_empty()
        && s
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-'))
}
