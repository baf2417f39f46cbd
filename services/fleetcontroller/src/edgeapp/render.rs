//! What an EdgeApplication asks for, as objects to apply: each Deployment manifest once per
//! target (named `<name>-<group>`, or `<name>-ls-<hash>` for a label target, pinned to the
//! target's nodes, with the target's overriders), every other manifest once (Services with
//! the same-group topology annotation). Pure: no API calls.
//!
//! Served kinds are `apps/v1` Deployment and `v1` Service, ConfigMap and Secret (the RBAC
//! shipped for fleetcontroller covers exactly these). Objects go to the EdgeApplication's
//! namespace: a manifest naming another namespace is refused (as KubeEdge's owner references
//! could not reach it either), so an EdgeApplication cannot write outside its namespace.

use std::collections::{BTreeMap, BTreeSet};

use kube::Resource as _;
use serde_json::{Value, json};

use super::overriders::{self, object, object_at};
use crate::api::edgeapp::{EdgeApplication, Overriders, ResourceIdentifier};
use crate::api::{BELONGING_TO, RANGE_NODEGROUP, SERVICE_TOPOLOGY};

/// A kind an EdgeApplication may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `apps/v1` Deployment: one copy per target.
    Deployment,
    /// `v1` Service: one copy, with [`SERVICE_TOPOLOGY`].
    Service,
    /// `v1` ConfigMap: one copy.
    ConfigMap,
    /// `v1` Secret: one copy.
    Secret,
}

impl Kind {
    /// The served kind of `api_version`/`kind`, if any.
    pub fn of(api_version: &str, kind: &str) -> Option<Self> {
        match (api_version, kind) {
            ("apps/v1", "Deployment") => Some(Self::Deployment),
            ("v1", "Service") => Some(Self::Service),
            ("v1", "ConfigMap") => Some(Self::ConfigMap),
            ("v1", "Secret") => Some(Self::Secret),
            _ => None,
        }
    }

    /// (API group, version, kind, plural resource).
    pub const fn gvkr(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Self::Deployment => ("apps", "v1", "Deployment", "deployments"),
            Self::Service => ("", "v1", "Service", "services"),
            Self::ConfigMap => ("", "v1", "ConfigMap", "configmaps"),
            Self::Secret => ("", "v1", "Secret", "secrets"),
        }
    }

    /// The identifier of object `name` of this kind in `namespace`, made from manifest
    /// `ordinal`.
    pub fn identifier(self, ordinal: u32, namespace: &str, name: &str) -> ResourceIdentifier {
        let (group, version, kind, resource) = self.gvkr();
        ResourceIdentifier {
            ordinal,
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            resource: resource.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }
}

/// One object to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// Its kind.
    pub kind: Kind,
    /// Its identity (the manifest's ordinal, kind, namespace, name).
    pub id: ResourceIdentifier,
    /// The full object, owned by the EdgeApplication (controller reference).
    pub object: Value,
}

/// A manifest (or one target's copy of it) that cannot be made, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The manifest's index.
    pub ordinal: u32,
    /// What is wrong, for the Warning event and the log.
    pub reason: String,
}

/// A target: how its copies are named, pinned and overridden.
struct Target<'a> {
    /// Appended to a Deployment's name after a `-`.
    suffix: String,
    /// The pod template's placement.
    pin: Value,
    overriders: &'a Overriders,
}

/// The objects `app` asks for and the manifests it cannot have. An app without a namespace
/// or uid (not from the API server) gets neither.
pub fn render(app: &EdgeApplication) -> (Vec<Desired>, Vec<Problem>) {
    let (mut desired, mut problems) = (Vec::new(), Vec::new());
    let (Some(namespace), Some(owner)) = (
        app.meta().namespace.as_deref(),
        app.controller_owner_ref(&()),
    ) else {
        return (desired, problems);
    };
    let owner = json!([owner]);
    let targets = targets(app);
    let mut names = BTreeSet::new();
    for (ordinal, manifest) in app.spec.workload_template.manifests.iter().enumerate() {
        let ordinal = u32::try_from(ordinal).unwrap_or(u32::MAX);
        let mut problem = |reason: String| problems.push(Problem { ordinal, reason });
        let (kind, mut base) = match validate(manifest, namespace) {
            Ok(ok) => ok,
            Err(reason) => {
                problem(reason);
                continue;
            }
        };
        let meta = object(&mut base, "metadata");
        meta.insert("namespace".to_owned(), json!(namespace));
        meta.insert("ownerReferences".to_owned(), owner.clone());
        let name = meta["name"].as_str().unwrap_or_default().to_owned();
        let copies = if kind == Kind::Deployment {
            targets
                .iter()
                .filter_map(|target| {
                    let mut copy = base.clone();
                    let name = format!("{name}-{}", target.suffix);
                    object(&mut copy, "metadata").insert("name".to_owned(), json!(name));
                    let spec = copy
                        .pointer_mut("/spec/template/spec")
                        .filter(|v| v.is_object());
                    let Some(pod) = spec else {
                        problem("a Deployment without spec.template.spec".to_owned());
                        return None;
                    };
                    pin(pod, &target.pin);
                    match overriders::apply(&mut copy, target.overriders) {
                        Ok(()) => Some((name, copy)),
                        Err(error) => {
                            problem(format!("target {:?}: {error}", target.suffix));
                            None
                        }
                    }
                })
                .collect()
        } else {
            if kind == Kind::Service {
                let meta = object(&mut base, "metadata");
                object_at(meta, "annotations")
                    .insert(SERVICE_TOPOLOGY.to_owned(), json!(RANGE_NODEGROUP));
            }
            vec![(name, base)]
        };
        for (name, object) in copies {
            let (_, _, kind_name, _) = kind.gvkr();
            if !names.insert((kind_name, name.clone())) {
                problem(format!("{kind_name} {name:?} would be made twice"));
                continue;
            }
            desired.push(Desired {
                kind,
                id: kind.identifier(ordinal, namespace, &name),
                object,
            });
        }
    }
    (desired, problems)
}

/// The manifest's served kind and a copy without the fields the API server owns, or why it
/// cannot be made.
fn validate(manifest: &Value, namespace: &str) -> Result<(Kind, Value), String> {
    let Some(fields) = manifest.as_object() else {
        return Err("a manifest is not an object".to_owned());
    };
    let api_version = fields
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind_name = fields
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = Kind::of(api_version, kind_name).ok_or_else(|| {
        format!(
            "{api_version}/{kind_name} is not served (apps/v1 Deployment, v1 Service, \
             ConfigMap and Secret are)"
        )
    })?;
    let meta = fields.get("metadata").and_then(Value::as_object);
    let name = meta.and_then(|m| m.get("name")).and_then(Value::as_str);
    if name.is_none_or(str::is_empty) {
        return Err(format!("a {kind_name} without metadata.name"));
    }
    if let Some(other) = meta
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty() && *ns != namespace)
    {
        return Err(format!(
            "{kind_name} {:?} names namespace {other:?}; an EdgeApplication's objects live in its own ({namespace:?})",
            name.unwrap_or_default()
        ));
    }
    let mut copy = manifest.clone();
    let meta = object(&mut copy, "metadata");
    for owned in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    ] {
        meta.remove(owned);
    }
    if let Some(fields) = copy.as_object_mut() {
        fields.remove("status");
    }
    Ok((kind, copy))
}

/// The targets of `app`: its NodeGroups in order, then its label selections.
fn targets(app: &EdgeApplication) -> Vec<Target<'_>> {
    let scope = &app.spec.workload_scope;
    let groups = scope.target_node_groups.iter().map(|group| Target {
        suffix: group.name.clone(),
        pin: json!({"nodeSelector": {BELONGING_TO: group.name}}),
        overriders: &group.overriders,
    });
    let labels = scope.target_node_labels.iter().map(|target| {
        let selector = &target.label_selector;
        let labels: BTreeMap<_, _> = selector.match_labels.clone().unwrap_or_default();
        let mut expressions: Vec<Value> = labels
            .iter()
            .map(|(k, v)| json!({"key": k, "operator": "In", "values": [v]}))
            .collect();
        expressions.extend(
            selector
                .match_expressions
                .iter()
                .flatten()
                .map(|e| json!(e)),
        );
        Target {
            suffix: format!("ls-{}", label_hash(&labels)),
            pin: json!({"affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": expressions}]
                }
            }}}),
            overriders: &target.overriders,
        }
    });
    groups.chain(labels).collect()
}

/// KubeEdge's name of a label target: the first 4 bytes of SHA-256 over each `key` and
/// `value` of `matchLabels` in key order, in hex.
fn label_hash(labels: &BTreeMap<String, String>) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for (key, value) in labels {
        context.update(key.as_bytes());
        context.update(value.as_bytes());
    }
    context.finish().as_ref()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Puts the target's placement into the pod spec, replacing its nodeSelector (group) or
/// node affinity (labels).
fn pin(pod: &mut Value, placement: &Value) {
    let pod = pod.as_object_mut().expect("checked to be an object");
    for (key, value) in placement.as_object().into_iter().flatten() {
        if key == "affinity" {
            let affinity = object_at(pod, "affinity");
            affinity.insert("nodeAffinity".to_owned(), value["nodeAffinity"].clone());
        } else {
            pod.insert(key.clone(), value.clone());
        }
    }
}

#[cfg(test)]
mod tests;
