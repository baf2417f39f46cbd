//! Resource paths, parsed once at the boundary into typed keys.
//!
//! Following KubeEdge, the edge names an object `<namespace>/<type>/<name>` and the cloud
//! prefixes the node: `node/<node>/<namespace>/<type>/<name>`. Cluster-scoped objects use
//! [`CLUSTER_SCOPE`] (`"_"`) as namespace; `_` can never be a Kubernetes namespace name, so the
//! path stays unambiguous. Names may not contain `/`.

use std::fmt;
use std::str::FromStr;

use crate::{AppType, Error, Result};

/// The namespace segment of cluster-scoped objects (nodes).
pub const CLUSTER_SCOPE: &str = "_";

/// The name segment of a query that names a collection rather than one object
/// ([`ResourceKey::service_list`]); like [`CLUSTER_SCOPE`], `_` is never a Kubernetes name.
pub const LIST_NAME: &str = "_";

/// Longest accepted path segment, in bytes (a DNS-1123 subdomain is at most 253).
const MAX_SEGMENT: usize = 253;

/// The kinds of object that cross the cloud <-> edge boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceType {
    /// `v1/Pod`.
    Pod,
    /// A pod's `.status` only (edge -> cloud).
    PodStatus,
    /// `v1/ConfigMap`.
    ConfigMap,
    /// `v1/Secret`.
    Secret,
    /// `v1/Node` (cluster-scoped).
    Node,
    /// A node's `.status` only (edge -> cloud, cluster-scoped).
    NodeStatus,
    /// `coordination.k8s.io/v1/Lease` in `kube-node-lease`.
    Lease,
    /// `v1/Event` (edge -> cloud).
    Event,
    /// `v1/ServiceAccountToken` request (edge -> cloud query).
    ServiceAccountToken,
    /// The `v1/Service`s of one namespace, as a `v1/ServiceList` (edge -> cloud query,
    /// [`ResourceKey::service_list`]), for the kubelet's service environment variables.
    ServiceList,
    /// `devices.kubeedge.io/v1beta1/Device` (KubeEdge v1.23 device API).
    Device,
    /// `devices.kubeedge.io/v1beta1/DeviceModel`.
    DeviceModel,
    /// A device twin's state (edge <-> cloud).
    Twin,
    /// A Device's reported twins, state and last online time (edge -> cloud), written into
    /// the `devices.kubeedge.io/v1beta1/DeviceStatus` of the same name.
    DeviceStatus,
    /// `v1/Service` (cloud -> edge: every node holds every Service, for its Service proxy and
    /// cluster DNS, as kube-proxy and CoreDNS watch them all).
    Service,
    /// `discovery.k8s.io/v1/EndpointSlice` (cloud -> edge, like [`ResourceType::Service`]).
    EndpointSlice,
    /// `certificates.k8s.io/v1/ClusterTrustBundle` by name (cluster-scoped; edge -> cloud
    /// query `_/clustertrustbundle/<name>`, answered with a `ClusterTrustBundleList` of zero or
    /// one bundle), for the kubelet's `clusterTrustBundle` projected volume source.
    ClusterTrustBundle,
    /// Every `certificates.k8s.io/v1/ClusterTrustBundle` of one signer (cluster-scoped; edge
    /// -> cloud query `_/clustertrustbundlelist/<signer>`, the signer name written with `:`
    /// for its `/` as Kubernetes prefixes the bundles' names: [`ResourceKey::trust_bundles_of`]).
    ClusterTrustBundleList,
    /// `certificates.k8s.io/v1/PodCertificateRequest` (edge -> cloud query
    /// `<ns>/podcertificaterequest/<name>`: with a request as content, created for the pod
    /// `<name>`; empty, the request `<name>` read), for the kubelet's `podCertificate`
    /// projected volume source.
    PodCertificateRequest,
    /// One node's task of an `operations.kubeedge.io` job (cloud -> edge, group `fleet`,
    /// cluster-scoped): `_/nodetask/<job kind>.<job name>`, e.g.
    /// `_/nodetask/imageprepulljob.cache-web`; `_/nodetask/_` is the resync marker.
    NodeTask,
    /// A node's progress on a [`ResourceType::NodeTask`] of the same name (edge -> cloud,
    /// group `fleet`, cluster-scoped).
    NodeTaskStatus,
    /// A type of a third-party group's resources, known only to its controller and edge
    /// apps; valid only in messages of an [`crate::AppGroup`].
    App(AppType),
}

impl ResourceType {
    /// The wire name, e.g. `"pod"`.
    pub fn as_str(&self) -> &str {
        match self {
            Self::App(app) => app.as_str(),
            verge => verge.metric_label(),
        }
    }

    /// A name for a metrics label or a statistics table: the wire name of Verge's own types,
    /// `"app"` for every third party's (their names are not bounded in number).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::App(_) => "app",
            Self::Pod => "pod",
            Self::PodStatus => "podstatus",
            Self::ConfigMap => "configmap",
            Self::Secret => "secret",
            Self::Node => "node",
            Self::NodeStatus => "nodestatus",
            Self::Lease => "lease",
            Self::Event => "event",
            Self::ServiceAccountToken => "serviceaccounttoken",
            Self::ServiceList => "servicelist",
            Self::Device => "device",
            Self::DeviceModel => "devicemodel",
            Self::Twin => "twin",
            Self::DeviceStatus => "devicestatus",
            Self::Service => "service",
            Self::EndpointSlice => "endpointslice",
            Self::ClusterTrustBundle => "clustertrustbundle",
            Self::ClusterTrustBundleList => "clustertrustbundlelist",
            Self::PodCertificateRequest => "podcertificaterequest",
            Self::NodeTask => "nodetask",
            Self::NodeTaskStatus => "nodetaskstatus",
        }
    }

    /// Whether this is one of Verge's own types (not a third party's [`AppType`]).
    pub const fn is_verge(self) -> bool {
        !matches!(self, Self::App(_))
    }

    /// Whether objects of this type live outside namespaces.
    pub const fn is_cluster_scoped(self) -> bool {
        matches!(
            self,
            Self::Node
                | Self::NodeStatus
                | Self::ClusterTrustBundle
                | Self::ClusterTrustBundleList
                | Self::NodeTask
                | Self::NodeTaskStatus
        )
    }
}

impl FromStr for ResourceType {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "pod" => Self::Pod,
            "podstatus" => Self::PodStatus,
            "configmap" => Self::ConfigMap,
            "secret" => Self::Secret,
            "node" => Self::Node,
            "nodestatus" => Self::NodeStatus,
            "lease" => Self::Lease,
            "event" => Self::Event,
            "serviceaccounttoken" => Self::ServiceAccountToken,
            "servicelist" => Self::ServiceList,
            "device" => Self::Device,
            "devicemodel" => Self::DeviceModel,
            "twin" => Self::Twin,
            "devicestatus" => Self::DeviceStatus,
            "service" => Self::Service,
            "endpointslice" => Self::EndpointSlice,
            "clustertrustbundle" => Self::ClusterTrustBundle,
            "clustertrustbundlelist" => Self::ClusterTrustBundleList,
            "podcertificaterequest" => Self::PodCertificateRequest,
            "nodetask" => Self::NodeTask,
            "nodetaskstatus" => Self::NodeTaskStatus,
            other => match AppType::parse(other) {
                Some(app) => Self::App(app),
                None => return Err(Error::UnknownResourceType(other.to_owned())),
            },
        })
    }
}

impl fmt::Display for ResourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An object's key as seen from the edge: `<namespace>/<type>/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    /// Namespace, or [`CLUSTER_SCOPE`] for cluster-scoped objects.
    pub namespace: String,
    /// The object's type.
    pub kind: ResourceType,
    /// The object's name.
    pub name: String,
}

impl ResourceKey {
    /// A key of a namespaced object.
    pub fn new(namespace: impl Into<String>, kind: ResourceType, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            kind,
            name: name.into(),
        }
    }

    /// A key of a cluster-scoped object (namespace [`CLUSTER_SCOPE`]).
    pub fn cluster(kind: ResourceType, name: impl Into<String>) -> Self {
        Self::new(CLUSTER_SCOPE, kind, name)
    }

    /// The key of a query for every Service of `namespace`: `<namespace>/servicelist/_`
    /// ([`LIST_NAME`]).
    pub fn service_list(namespace: impl Into<String>) -> Self {
        Self::new(namespace, ResourceType::ServiceList, LIST_NAME)
    }

    /// The key of a query for every ClusterTrustBundle of `signer`:
    /// `_/clustertrustbundlelist/<signer>` with the signer's `/` written `:` (a signer name
    /// is `<domain>/<path>` with exactly one `/` and no `:`, and Kubernetes names a signer's
    /// bundles `<domain>:<path>:<suffix>`); [`ResourceKey::trust_bundle_signer`] reverses it.
    pub fn trust_bundles_of(signer: &str) -> Self {
        Self::cluster(
            ResourceType::ClusterTrustBundleList,
            signer.replace('/', ":"),
        )
    }

    /// The signer name a [`ResourceKey::trust_bundles_of`] key names (`:` back to `/`);
    /// `None` for other keys and for names that are no `<domain>:<path>`.
    pub fn trust_bundle_signer(&self) -> Option<String> {
        let ok = self.kind == ResourceType::ClusterTrustBundleList
            && self.namespace == CLUSTER_SCOPE
            && self.name.matches(':').count() == 1
            && !self.name.starts_with(':')
            && !self.name.ends_with(':')
            && !self.name.contains('/');
        ok.then(|| self.name.replace(':', "/"))
    }

    /// The namespace as Kubernetes knows it: `None` for cluster-scoped objects.
    pub fn k8s_namespace(&self) -> Option<&str> {
        (self.namespace != CLUSTER_SCOPE).then_some(self.namespace.as_str())
    }

    fn from_segments(path: &str, ns: &str, kind: &str, name: &str) -> Result<Self> {
        let bad = |reason| Error::ResourcePath {
            path: path.to_owned(),
            reason,
        };
        check_segment(ns).map_err(bad)?;
        check_segment(name).map_err(bad)?;
        let kind: ResourceType = kind.parse().map_err(|_| bad("unknown resource type"))?;
        Ok(Self::new(ns, kind, name))
    }
}

fn check_segment(s: &str) -> std::result::Result<(), &'static str> {
    if s.is_empty() {
        return Err("empty segment");
    }
    if s.len() > MAX_SEGMENT {
        return Err("segment longer than 253 bytes");
    }
    if s.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("segment contains whitespace or control characters");
    }
    Ok(())
}

impl FromStr for ResourceKey {
    type Err = Error;

    /// Parses `<namespace>/<type>/<name>`.
    fn from_str(path: &str) -> Result<Self> {
        let parts: Vec<&str> = path.split('/').collect();
        match parts.as_slice() {
            [ns, kind, name] => Self::from_segments(path, ns, kind, name),
            _ => Err(Error::ResourcePath {
                path: path.to_owned(),
                reason: "expected <namespace>/<type>/<name>",
            }),
        }
    }
}

impl fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.kind, self.name)
    }
}

/// An object's key as seen from the cloud: `node/<node>/<namespace>/<type>/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeResource {
    /// The edge node the object belongs to.
    pub node: String,
    /// The object's edge-side key.
    pub key: ResourceKey,
}

impl NodeResource {
    /// Pairs a node with an edge-side key.
    pub fn new(node: impl Into<String>, key: ResourceKey) -> Self {
        Self {
            node: node.into(),
            key,
        }
    }
}

impl FromStr for NodeResource {
    type Err = Error;

    /// Parses `node/<node>/<namespace>/<type>/<name>`.
    fn from_str(path: &str) -> Result<Self> {
        let parts: Vec<&str> = path.split('/').collect();
        match parts.as_slice() {
            ["node", node, ns, kind, name] => {
                check_segment(node).map_err(|reason| Error::ResourcePath {
                    path: path.to_owned(),
                    reason,
                })?;
                Ok(Self::new(
                    *node,
                    ResourceKey::from_segments(path, ns, kind, name)?,
                ))
            }
            _ => Err(Error::ResourcePath {
                path: path.to_owned(),
                reason: "expected node/<node>/<namespace>/<type>/<name>",
            }),
        }
    }
}

impl fmt::Display for NodeResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node/{}/{}", self.node, self.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_path_round_trip() {
        let k: ResourceKey = "default/pod/web-1".parse().expect("valid");
        assert_eq!(k, ResourceKey::new("default", ResourceType::Pod, "web-1"));
        assert_eq!(k.to_string(), "default/pod/web-1");
        let n: ResourceKey = "_/node/edge-1".parse().expect("valid");
        assert_eq!(n.k8s_namespace(), None);
        let l: ResourceKey = "ns/servicelist/_".parse().expect("valid");
        assert_eq!(l, ResourceKey::service_list("ns"));
    }

    #[test]
    fn trust_bundle_keys() {
        let k: ResourceKey = "_/clustertrustbundle/example.com:signer:root"
            .parse()
            .expect("valid");
        assert_eq!(k.kind, ResourceType::ClusterTrustBundle);
        assert!(k.kind.is_cluster_scoped());
        assert_eq!(k.k8s_namespace(), None);
        let signer = ResourceKey::trust_bundles_of("example.com/signer");
        assert_eq!(
            signer.to_string(),
            "_/clustertrustbundlelist/example.com:signer"
        );
        assert_eq!(
            signer.to_string().parse::<ResourceKey>().expect("valid"),
            signer
        );
        assert_eq!(
            signer.trust_bundle_signer().as_deref(),
            Some("example.com/signer")
        );
        for bad in [
            "_/clustertrustbundlelist/a:b:c",
            "_/clustertrustbundlelist/ab",
            "_/clustertrustbundlelist/:b",
            "x/clustertrustbundlelist/a:b",
            "_/clustertrustbundle/a:b",
        ] {
            let key: ResourceKey = bad.parse().expect("parses");
            assert_eq!(key.trust_bundle_signer(), None, "{bad}");
        }
        for kind in [
            ResourceType::ClusterTrustBundle,
            ResourceType::ClusterTrustBundleList,
        ] {
            assert_eq!(
                kind.as_str().parse::<ResourceType>().expect("wire name"),
                kind
            );
        }
    }

    #[test]
    fn cloud_path_round_trip() {
        let r: NodeResource = "node/edge-1/default/configmap/cfg".parse().expect("valid");
        assert_eq!(r.node, "edge-1");
        assert_eq!(r.key.kind, ResourceType::ConfigMap);
        assert_eq!(r.to_string(), "node/edge-1/default/configmap/cfg");
    }

    #[test]
    fn malformed_paths_are_rejected() {
        for bad in [
            "",
            "a/b",
            "default/pod/",
            // Not an RFC 1123 label, so neither Verge's type nor a third party's.
            "default/Frob/x",
            "default/fr_ob/x",
            "a/pod/b/c",
            "a/pod/x y",
        ] {
            assert!(bad.parse::<ResourceKey>().is_err(), "{bad:?} should fail");
        }
        // Any other label is a third party's type (valid only in its own group's messages).
        assert!(matches!(
            "default/frob/x".parse::<ResourceKey>().map(|k| k.kind),
            Ok(ResourceType::App(_))
        ));
        for bad in [
            "edge/x/default/pod/a",
            "node//default/pod/a",
            "node/x/default/pod",
        ] {
            assert!(bad.parse::<NodeResource>().is_err(), "{bad:?} should fail");
        }
    }
}
