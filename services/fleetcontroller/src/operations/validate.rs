//! The checks every job passes before anything is sent to a node: each field is parsed into a
//! typed value ([`Targets`], [`Upgrade`], [`PrePull`], [`ConfigUpdate`]) or refused with an
//! [`Invalid`] naming the field. Nothing here, nor on the node, ever builds a command line
//! from a field (KubeEdge's upgrade and config jobs did, CVE-2026-62371 and CVE-2026-62182):
//! a version is a semantic version, an image a reference of the distribution grammar, a
//! Secret a namespace and a name, a configuration field a dotted path of identifiers.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::core::Selector;

use crate::api::operations::{
    ConfigUpdateJobSpec, ImagePrePullJobSpec, JobTargets, NodeUpgradeJobSpec,
};
use crate::edgeapp::image::ImageRef;

/// KubeEdge's default for `timeoutSeconds` (also used for 0).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest `timeoutSeconds` accepted: one day.
pub const MAX_TIMEOUT_SECONDS: i64 = 86_400;
/// KubeEdge's default for `failureTolerate`.
pub const DEFAULT_FAILURE_TOLERATE: f64 = 0.1;
/// The most images one ImagePrePullJob lists.
pub const MAX_IMAGES: usize = 64;
/// The most further tries of a failed pull.
pub const MAX_RETRIES: i64 = 16;
/// The most fields one ConfigUpdateJob changes.
pub const MAX_FIELDS: usize = 64;
/// The longest value of a changed field, in bytes.
pub const MAX_VALUE_LEN: usize = 4096;
/// The image holding edgecore when `image` is unset: KubeEdge's default repository name.
pub const DEFAULT_UPGRADE_IMAGE: &str = "kubeedge/installation-package";

/// A field that cannot be accepted: `field` is its path in the object (`spec.version`),
/// `reason` says why, quoting the value (escaped).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct Invalid {
    /// The field's path, e.g. `spec.imagePrePullTemplate.images[1]`.
    pub field: String,
    /// Why, for people.
    pub reason: String,
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Invalid {
    Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

/// Which nodes a job names: by name (each a DNS subdomain) or by a label selector.
#[derive(Debug, Clone)]
pub enum Selection {
    /// `nodeNames`.
    Names(BTreeSet<String>),
    /// `labelSelector`.
    Labels(Selector),
}

/// The shared knobs of a job, parsed.
#[derive(Debug, Clone)]
pub struct Targets {
    /// The nodes.
    pub selection: Selection,
    /// How long one node's task may take.
    pub timeout: Duration,
    /// How many nodes run at once (at least 1).
    pub concurrency: u32,
    /// The fraction of nodes (0 to 1) that may fail before the job fails.
    pub failure_tolerate: f64,
    /// Checks before the task.
    pub checks: BTreeSet<CheckItem>,
}

/// A node check before a task (KubeEdge's `checkItems`): usage below 90 %.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CheckItem {
    /// `cpu`.
    Cpu,
    /// `mem`.
    Mem,
    /// `disk`.
    Disk,
}

/// A NodeUpgradeJob, parsed.
#[derive(Debug, Clone)]
pub struct Upgrade {
    /// The shared knobs.
    pub targets: Targets,
    /// The version, without its leading `v`.
    pub version: semver::Version,
    /// The image to read edgecore from: `image` with `version` as its tag.
    pub image: ImageRef,
    /// Digests the image must have, per architecture (`amd64`, `arm64`).
    pub digests: BTreeMap<&'static str, String>,
    /// Whether each node waits for confirmation.
    pub require_confirmation: bool,
}

/// An ImagePrePullJob, parsed.
#[derive(Debug, Clone)]
pub struct PrePull {
    /// The shared knobs.
    pub targets: Targets,
    /// The images, in the spec's order, without repeats.
    pub images: Vec<ImageRef>,
    /// The pull Secret, `(namespace, name)`.
    pub secret: Option<(String, String)>,
    /// Further tries of a failed pull.
    pub retries: u32,
}

/// A ConfigUpdateJob, parsed.
#[derive(Debug, Clone)]
pub struct ConfigUpdate {
    /// The shared knobs.
    pub targets: Targets,
    /// Field path (its segments) to its new value, as written.
    pub fields: BTreeMap<Vec<String>, String>,
}

/// Parses a NodeUpgradeJob's spec.
///
/// # Errors
/// The first [`Invalid`] field, in the order: version, image, digests, targets.
pub fn upgrade(spec: &NodeUpgradeJobSpec) -> Result<Upgrade, Invalid> {
    let version = parse_version(&spec.version).map_err(|r| invalid("spec.version", r))?;
    let written = if spec.image.is_empty() {
        DEFAULT_UPGRADE_IMAGE
    } else {
        &spec.image
    };
    let mut image = ImageRef::parse(written).map_err(|e| invalid("spec.image", e.to_string()))?;
    // As in KubeEdge, the version is the tag, whatever the image said.
    image.tag = Some(format!("v{version}"));
    image.digest = None;
    let mut digests = BTreeMap::new();
    if let Some(getter) = &spec.image_digest_getter {
        for (arch, digest) in [("amd64", &getter.amd64), ("arm64", &getter.arm64)] {
            if digest.is_empty() {
                continue;
            }
            if !is_sha256_digest(digest) {
                return Err(invalid(
                    format!("spec.imageDigestGatter.{arch}"),
                    format!("{digest:?} is not sha256:<64 lower-case hex digits>"),
                ));
            }
            digests.insert(arch, digest.clone());
        }
        if getter.registry_api.is_some() {
            return Err(invalid(
                "spec.imageDigestGatter.registryAPI",
                "reading digests from a registry is not supported; give amd64 and arm64",
            ));
        }
    }
    Ok(Upgrade {
        targets: targets("spec", &spec.targets)?,
        version,
        image,
        digests,
        require_confirmation: spec.require_confirmation,
    })
}

/// Parses an ImagePrePullJob's spec.
///
/// # Errors
/// The first [`Invalid`] field.
pub fn prepull(spec: &ImagePrePullJobSpec) -> Result<PrePull, Invalid> {
    let template = &spec.image_pre_pull_template;
    let base = "spec.imagePrePullTemplate";
    if template.images.is_empty() {
        return Err(invalid(format!("{base}.images"), "lists no image"));
    }
    if template.images.len() > MAX_IMAGES {
        return Err(invalid(
            format!("{base}.images"),
            format!(
                "lists {} images, more than {MAX_IMAGES}",
                template.images.len()
            ),
        ));
    }
    let mut images: Vec<ImageRef> = Vec::new();
    for (i, image) in template.images.iter().enumerate() {
        let parsed = ImageRef::parse(image)
            .map_err(|e| invalid(format!("{base}.images[{i}]"), e.to_string()))?;
        if !images.contains(&parsed) {
            images.push(parsed);
        }
    }
    let secret = if template.image_secret.is_empty() {
        None
    } else {
        let field = format!("{base}.imageSecrets");
        let (ns, name) = template.image_secret.split_once('/').ok_or_else(|| {
            invalid(
                &field,
                format!("{:?} is not <namespace>/<name>", template.image_secret),
            )
        })?;
        if !is_dns_label(ns) || !is_dns_subdomain(name) {
            return Err(invalid(
                field,
                format!(
                    "{:?} is not <namespace>/<name> of valid names",
                    template.image_secret
                ),
            ));
        }
        Some((ns.to_owned(), name.to_owned()))
    };
    let retries = match template.retry_times {
        None => 0,
        Some(n) if (0..=MAX_RETRIES).contains(&n) => u32::try_from(n).unwrap_or(0),
        Some(n) => {
            return Err(invalid(
                format!("{base}.retryTimes"),
                format!("{n} is not from 0 to {MAX_RETRIES}"),
            ));
        }
    };
    Ok(PrePull {
        targets: targets(base, &template.targets)?,
        images,
        secret,
        retries,
    })
}

/// Parses a ConfigUpdateJob's spec.
///
/// # Errors
/// The first [`Invalid`] field.
pub fn config_update(spec: &ConfigUpdateJobSpec) -> Result<ConfigUpdate, Invalid> {
    if spec.update_fields.is_empty() {
        return Err(invalid("spec.updateFields", "names no field"));
    }
    if spec.update_fields.len() > MAX_FIELDS {
        return Err(invalid(
            "spec.updateFields",
            format!(
                "names {} fields, more than {MAX_FIELDS}",
                spec.update_fields.len()
            ),
        ));
    }
    let mut fields = BTreeMap::new();
    for (path, value) in &spec.update_fields {
        let field = format!("spec.updateFields[{path:?}]");
        let segments = parse_field_path(path).map_err(|r| invalid(&field, r))?;
        if value.len() > MAX_VALUE_LEN {
            return Err(invalid(
                field,
                format!("is longer than {MAX_VALUE_LEN} bytes"),
            ));
        }
        if value
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t')
        {
            return Err(invalid(field, "holds control characters"));
        }
        fields.insert(segments, value.clone());
    }
    Ok(ConfigUpdate {
        targets: targets("spec", &spec.targets)?,
        fields,
    })
}

/// The shared knobs under `base`.
fn targets(base: &str, t: &JobTargets) -> Result<Targets, Invalid> {
    let selection = match (&t.node_names[..], &t.label_selector) {
        ([], None) => {
            return Err(invalid(
                base,
                "selects no node: set nodeNames or labelSelector",
            ));
        }
        ([_, ..], Some(_)) => {
            return Err(invalid(
                base,
                "sets both nodeNames and labelSelector; set one",
            ));
        }
        (names @ [_, ..], None) => {
            for (i, name) in names.iter().enumerate() {
                if !is_dns_subdomain(name) {
                    return Err(invalid(
                        format!("{base}.nodeNames[{i}]"),
                        format!("{name:?} is not a node name"),
                    ));
                }
            }
            Selection::Names(names.iter().cloned().collect())
        }
        ([], Some(selector)) => Selection::Labels(
            Selector::try_from(selector.clone())
                .map_err(|e| invalid(format!("{base}.labelSelector"), e.to_string()))?,
        ),
    };
    let timeout = match t.timeout_seconds {
        None | Some(0) => DEFAULT_TIMEOUT,
        Some(s) if (1..=MAX_TIMEOUT_SECONDS).contains(&s) => {
            Duration::from_secs(u64::try_from(s).unwrap_or(300))
        }
        Some(s) => {
            return Err(invalid(
                format!("{base}.timeoutSeconds"),
                format!("{s} is not from 0 to {MAX_TIMEOUT_SECONDS}"),
            ));
        }
    };
    let concurrency = match t.concurrency {
        None | Some(0) => 1,
        Some(n) => u32::try_from(n).map_err(|_| {
            invalid(
                format!("{base}.concurrency"),
                format!("{n} is not a positive number"),
            )
        })?,
    };
    let failure_tolerate = if t.failure_tolerate.is_empty() {
        DEFAULT_FAILURE_TOLERATE
    } else {
        t.failure_tolerate
            .parse::<f64>()
            .ok()
            .filter(|f| (0.0..=1.0).contains(f))
            .ok_or_else(|| {
                invalid(
                    format!("{base}.failureTolerate"),
                    format!("{:?} is not a decimal from 0 to 1", t.failure_tolerate),
                )
            })?
    };
    let mut checks = BTreeSet::new();
    for (i, item) in t.check_items.iter().enumerate() {
        checks.insert(match item.as_str() {
            "cpu" => CheckItem::Cpu,
            "mem" => CheckItem::Mem,
            "disk" => CheckItem::Disk,
            _ => {
                return Err(invalid(
                    format!("{base}.checkItems[{i}]"),
                    format!("{item:?} is not cpu, mem or disk"),
                ));
            }
        });
    }
    Ok(Targets {
        selection,
        timeout,
        concurrency,
        failure_tolerate,
        checks,
    })
}

/// `v1.2.3` (or `1.2.3`, with semver's pre-release and build parts) as a semantic version.
fn parse_version(text: &str) -> Result<semver::Version, String> {
    let bare = text.strip_prefix('v').unwrap_or(text);
    let version = semver::Version::parse(bare)
        .map_err(|e| format!("{text:?} is not a version v<major>.<minor>.<patch>: {e}"))?;
    // The version becomes an image tag: at most 128 characters of the tag alphabet.
    let tag = format!("v{version}");
    if !crate::edgeapp::image::is_tag(&tag) {
        return Err(format!("{text:?} does not make a valid image tag"));
    }
    Ok(version)
}

/// A configuration field path: 1 to 8 segments joined by `.`, each an ASCII identifier
/// (`[A-Za-z][A-Za-z0-9]*`, at most 63 bytes).
fn parse_field_path(path: &str) -> Result<Vec<String>, String> {
    let segments: Vec<&str> = path.split('.').collect();
    let ok = (1..=8).contains(&segments.len())
        && segments.iter().all(|s| {
            s.len() <= 63
                && s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && s.chars().all(|c| c.is_ascii_alphanumeric())
        });
    if ok {
        Ok(segments.into_iter().map(str::to_owned).collect())
    } else {
        Err("is not a dotted path of identifiers, e.g. edged.maxPods".to_owned())
    }
}

/// `sha256:` and 64 lower-case hex digits.
fn is_sha256_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// An RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 bytes.
fn is_dns_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// An RFC 1123 subdomain (a Kubernetes object name): labels joined by `.`, at most 253 bytes.
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests;
