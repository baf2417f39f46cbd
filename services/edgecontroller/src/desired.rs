//! What a node should hold, and what to send to get it there. Pure functions, no I/O.
//!
//! A node holds its own Node object (KubeEdge sends it so the edge knows its labels, taints and
//! spec as the cloud sees them), the pods bound to it (`spec.nodeName`), the configmaps and
//! secrets those pods reference (KubeEdge edgecontroller / kubelet `configmap`/`secret`
//! managers), a trimmed Node of each other edge node of its site ([`crate::site`]), and every
//! Service and EndpointSlice (its Service proxy and cluster DNS, as
//! kube-proxy and CoreDNS watch them). The
//! downstream side compares this *desired* set with what the node *holds* (its inventory on
//! connect, then what was sent since) and sends only the difference (docs/protocol.md,
//! "Resync by inventory").

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    Container, EnvFromSource, EnvVar, EphemeralContainer, Pod, PodSpec, Volume,
};
use verge_core::{ResourceKey, ResourceType};
use verge_proto::Inventory;

pub use verge_controller::diff::{Diff, Version, Versions};

/// The types downstream manages. Inventory entries of other types (device twins, ...) are
/// never deleted by the resync. Of type node: the node's own Node and its site peers'
/// ([`crate::site`]).
pub const fn is_managed(kind: ResourceType) -> bool {
    matches!(
        kind,
        ResourceType::Pod
            | ResourceType::ConfigMap
            | ResourceType::Secret
            | ResourceType::Node
            | ResourceType::Service
            | ResourceType::EndpointSlice
    )
}

/// The key of `node`'s own Node object (`_/node/<node>`).
pub fn node_key(node: &str) -> ResourceKey {
    ResourceKey::cluster(ResourceType::Node, node)
}

/// The configmaps and secrets `pod` references, in the pod's namespace: volumes (`configMap`,
/// `secret`, projected `configMap`/`secret` sources), `env[].valueFrom.configMapKeyRef` /
/// `secretKeyRef` and `envFrom[].configMapRef` / `secretRef` of every container, init
/// container and ephemeral container, and `imagePullSecrets` (as kubelet's
/// `podutil.VisitPodConfigmapNames` / `VisitPodSecretNames` do).
pub fn references(pod: &Pod) -> BTreeSet<ResourceKey> {
    let mut refs = BTreeSet::new();
    let Some(spec) = pod.spec.as_ref() else {
        return refs;
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut add = |kind: ResourceType, name: &str| {
        if !name.is_empty() {
            refs.insert(ResourceKey::new(ns, kind, name));
        }
    };
    for secret in spec.image_pull_secrets.iter().flatten() {
        add(ResourceType::Secret, &secret.name);
    }
    for volume in spec.volumes.iter().flatten() {
        volume_references(volume, &mut add);
    }
    for (env, env_from) in containers_env(spec) {
        for var in env.iter().flatten() {
            env_references(var, &mut add);
        }
        for source in env_from.iter().flatten() {
            env_from_references(source, &mut add);
        }
    }
    refs
}

type EnvLists<'a> = (&'a Option<Vec<EnvVar>>, &'a Option<Vec<EnvFromSource>>);

/// `env` and `envFrom` of every container, init container and ephemeral container.
fn containers_env(spec: &PodSpec) -> Vec<EnvLists<'_>> {
    fn plain(c: &Container) -> EnvLists<'_> {
        (&c.env, &c.env_from)
    }
    fn ephemeral(c: &EphemeralContainer) -> EnvLists<'_> {
        (&c.env, &c.env_from)
    }
    let mut out: Vec<EnvLists<'_>> = spec.containers.iter().map(plain).collect();
    out.extend(spec.init_containers.iter().flatten().map(plain));
    out.extend(spec.ephemeral_containers.iter().flatten().map(ephemeral));
    out
}

fn volume_references(volume: &Volume, add: &mut impl FnMut(ResourceType, &str)) {
    if let Some(cm) = &volume.config_map {
        add(ResourceType::ConfigMap, &cm.name);
    }
    if let Some(secret) = &volume.secret {
        add(
            ResourceType::Secret,
            secret.secret_name.as_deref().unwrap_or_default(),
        );
    }
    let sources = volume.projected.as_ref().and_then(|p| p.sources.as_ref());
    for source in sources.into_iter().flatten() {
        if let Some(cm) = &source.config_map {
            add(ResourceType::ConfigMap, &cm.name);
        }
        if let Some(secret) = &source.secret {
            add(ResourceType::Secret, &secret.name);
        }
    }
}

fn env_references(var: &EnvVar, add: &mut impl FnMut(ResourceType, &str)) {
    let Some(from) = &var.value_from else { return };
    if let Some(cm) = &from.config_map_key_ref {
        add(ResourceType::ConfigMap, &cm.name);
    }
    if let Some(secret) = &from.secret_key_ref {
        add(ResourceType::Secret, &secret.name);
    }
}

fn env_from_references(source: &EnvFromSource, add: &mut impl FnMut(ResourceType, &str)) {
    if let Some(cm) = &source.config_map_ref {
        add(ResourceType::ConfigMap, &cm.name);
    }
    if let Some(secret) = &source.secret_ref {
        add(ResourceType::Secret, &secret.name);
    }
}

/// Whether `pod` is bound to `node` (`spec.nodeName == node`).
pub fn is_bound_to(pod: &Pod, node: &str) -> bool {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
}

/// The key of `pod` (`<ns>/pod/<name>`).
pub fn pod_key(pod: &Pod) -> ResourceKey {
    ResourceKey::new(
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        ResourceType::Pod,
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// Whether any of `pods` bound to `node` references `key` (the authorization of a node's
/// configmap/secret query, as the Kubernetes node authorizer decides it).
pub fn node_references<'a>(
    node: &str,
    key: &ResourceKey,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> bool {
    pods.into_iter()
        .any(|p| is_bound_to(p, node) && references(p).contains(key))
}

/// The managed objects of `node`'s inventory, by key: pods, configmaps, secrets, Services,
/// EndpointSlices and Node objects (its own and its site peers'; one it should not hold, e.g.
/// of a node that left its site, is deleted). Entries that do not form a valid resource path
/// are left out ([`verge_controller::diff::held_from_inventory`]).
pub fn held_from_inventory(_node: &str, inventory: &Inventory) -> Versions {
    verge_controller::diff::held_from_inventory(inventory, |key| is_managed(key.kind))
}

/// The messages that bring a node holding `held` to `desired`. A node whose held versions
/// equal the desired ones gets an empty diff.
pub fn diff(desired: &Versions, held: &Versions) -> Diff {
    diff_by_content(desired, held, |_, _| false)
}

/// [`diff`], except that a key held at the desired uid but another resourceVersion is left
/// out when `same_content(key, held_version)` says that what the node holds does not differ
/// from the desired object in anything the edge acts on (only its status changed, see
/// [`crate::fingerprint`]). Only held objects of managed types are deleted.
pub fn diff_by_content(
    desired: &Versions,
    held: &Versions,
    same_content: impl FnMut(&ResourceKey, &Version) -> bool,
) -> Diff {
    verge_controller::diff::diff_by_content(desired, held, is_managed, same_content)
}

#[cfg(test)]
mod tests;
