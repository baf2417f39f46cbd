//! What the Services and EndpointSlices the node holds mean for its Service proxy, with
//! kube-proxy's semantics, as a plan of [`ServicePort`]s; pure.
//!
//! For each port of each Service with a cluster IP (not headless, not `ExternalName`: those
//! are DNS only), the backends are the endpoints of the Service's EndpointSlices (label
//! `kubernetes.io/service-name`, `addressType: IPv4`) whose slice port has the Service port's
//! name and protocol, taking the slice port's number (the endpointslice controller resolved
//! named and numeric target ports):
//! - endpoints that are ready (`conditions.ready` true or unset); when there are none, the
//!   serving ones that are terminating (kube-proxy's fallback, so a rolling update does not
//!   drop connections), else none: new connections are refused at once;
//! - with `internalTrafficPolicy: Local`, only endpoints on this node (none: dropped);
//! - with `trafficDistribution: PreferSameNode` the endpoints on this node when there are any,
//!   with `PreferClose` those on this node's site (its zone), else all;
//! - for a Service annotated `apps.kubeedge.io/service-topology: range-nodegroup` (KubeEdge's
//!   service topology, set on the Services of an EdgeApplication) on a node of a NodeGroup,
//!   only the endpoints on nodes of that group ([`NodeContext::group`]); on a node of no
//!   group, all;
//! - the ready endpoints this node does not reach directly ([`NodeContext::reaches`]: pods in
//!   the cloud or at another site, the API server) are the port's [`ServicePort::remote`]
//!   endpoints, reached through cloudhub (`EdgeHub.Dial`) while the node is online; the
//!   proxy counts each of them as one more backend of equal weight.
//!
//! `sessionAffinity: ClientIP` keeps a client on one backend for the Service's timeout
//! (default 10800 s). A `NodePort` (or `LoadBalancer`) Service is also reached on the node's
//! address at its node port.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};

use crate::catalog::objects::{Endpoint, EndpointSlice, Service, ServicePort as K8sPort};
use ipnet::Ipv4Net;
use verge_core::well_known::RANGE_NODEGROUP;

/// The label tying an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Kubernetes' default `sessionAffinityConfig.clientIP.timeoutSeconds`.
pub const DEFAULT_AFFINITY_SECONDS: u32 = 10_800;

/// What the plan needs to know of this node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeContext {
    /// The node's name (endpoints' `nodeName`).
    pub node: String,
    /// The node's address (NodePorts, hostNetwork endpoints of this node).
    pub node_ip: Option<Ipv4Addr>,
    /// The node's zone (its `topology.kubernetes.io/zone` label), for `PreferClose`.
    pub zone: Option<String>,
    /// The names of the nodes of this node's NodeGroup (its `apps.kubeedge.io/belonging-to`
    /// label), this one included, as far as it knows them (the group peers edgecontroller
    /// sent), for `range-nodegroup` Services; `None` on a node of no group.
    pub group: Option<std::collections::BTreeSet<String>>,
    /// The pod CIDRs this node reaches directly: its own and its site's.
    pub direct: Vec<Ipv4Net>,
}

impl NodeContext {
    /// Whether this node reaches endpoint `ip` of node `node_name` directly: an address of a
    /// pod CIDR it routes to, or its own address claimed by an endpoint of this node (a
    /// hostNetwork pod here).
    pub fn reaches(&self, ip: Ipv4Addr, node_name: Option<&str>) -> bool {
        (self.node_ip == Some(ip) && node_name == Some(self.node.as_str()))
            || self.direct.iter().any(|net| net.contains(&ip))
    }
}

/// A transport protocol of a Service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// The protocol of a Service or slice port (`TCP` when unset); `None` for others.
    pub fn parse(s: Option<&str>) -> Option<Self> {
        match s.unwrap_or("TCP") {
            "TCP" => Some(Self::Tcp),
            "UDP" => Some(Self::Udp),
            "SCTP" => Some(Self::Sctp),
            _ => None,
        }
    }

    /// nftables' name.
    pub fn nft(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Sctp => "sctp",
        }
    }
}

/// One backend of a Service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Backend {
    /// The endpoint's address.
    pub ip: Ipv4Addr,
    /// The target port.
    pub port: u16,
}

/// One port of one Service, as the proxy programs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// `<namespace>/<service>:<port name or number>/<protocol>`, unique in the plan.
    pub name: String,
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub service: String,
    /// The protocol.
    pub protocol: Protocol,
    /// The Service's IPv4 cluster IPs.
    pub cluster_ips: Vec<Ipv4Addr>,
    /// The Service port.
    pub port: u16,
    /// The node port, for `NodePort` and `LoadBalancer` Services.
    pub node_port: Option<u16>,
    /// The backends this node reaches directly, sorted.
    pub backends: Vec<Backend>,
    /// The ready endpoints this node does not reach directly (through cloudhub), sorted.
    /// With neither these nor [`backends`](Self::backends), new connections are refused at
    /// once.
    pub remote: Vec<Backend>,
    /// `sessionAffinity: ClientIP`: how long (seconds) a client sticks to its backend.
    pub affinity_seconds: Option<u32>,
}

/// Serves the HTTPS port of Service `service` (namespace, name) at `to`, a listener of this
/// node, in place of its endpoints: the TCP port named `https`, else port 443. Its only
/// backend becomes `to` and it has no remote endpoints, online or offline (the edge API in
/// front of the `kubernetes` Service).
pub fn serve_locally(ports: &mut [ServicePort], service: (&str, &str), to: SocketAddrV4) {
    let of_service = |p: &ServicePort| {
        p.namespace == service.0 && p.service == service.1 && p.protocol == Protocol::Tcp
    };
    let https = ports
        .iter()
        .position(|p| of_service(p) && p.name.ends_with(":https/tcp"))
        .or_else(|| ports.iter().position(|p| of_service(p) && p.port == 443));
    if let Some(port) = https.and_then(|i| ports.get_mut(i)) {
        port.backends = vec![Backend {
            ip: *to.ip(),
            port: to.port(),
        }];
        port.remote.clear();
    }
}

/// The plan for `services` and `slices` on the node `ctx`, sorted by name.
pub fn plan<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    ctx: &NodeContext,
) -> Vec<ServicePort> {
    let mut by_service: BTreeMap<(&str, &str), Vec<&EndpointSlice>> = BTreeMap::new();
    for slice in slices.into_iter().filter(|s| s.address_type == "IPv4") {
        let labels = slice.metadata.labels.as_ref();
        let Some(service) = labels.and_then(|l| l.get(SERVICE_NAME_LABEL)) else {
            continue;
        };
        let ns = slice.metadata.namespace.as_deref().unwrap_or("default");
        by_service.entry((ns, service)).or_default().push(slice);
    }
    let mut out = Vec::new();
    for service in services {
        let ns = service.metadata.namespace.as_deref().unwrap_or("default");
        let name = service.metadata.name.as_deref().unwrap_or_default();
        let Some(spec) = &service.spec else { continue };
        if spec.type_.as_deref() == Some("ExternalName") {
            continue;
        }
        let cluster_ips: Vec<Ipv4Addr> = spec
            .cluster_ips
            .iter()
            .flatten()
            .chain(spec.cluster_ip.iter())
            .filter_map(|ip| ip.parse().ok())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if cluster_ips.is_empty() {
            continue; // headless: DNS only
        }
        let node_ports = matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"));
        let affinity = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
            spec.session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds)
                .and_then(|t| u32::try_from(t).ok())
                .unwrap_or(DEFAULT_AFFINITY_SECONDS)
        });
        let slices = by_service
            .get(&(ns, name))
            .map(Vec::as_slice)
            .unwrap_or_default();
        for port in spec.ports.iter().flatten() {
            let Some(protocol) = Protocol::parse(port.protocol.as_deref()) else {
                continue;
            };
            let Ok(number) = u16::try_from(port.port) else {
                continue;
            };
            let label = port.name.clone().unwrap_or_else(|| number.to_string());
            let (backends, remote) = backends(service, port, protocol, slices, ctx);
            out.push(ServicePort {
                name: format!("{ns}/{name}:{label}/{}", protocol.nft()),
                namespace: ns.to_owned(),
                service: name.to_owned(),
                protocol,
                cluster_ips: cluster_ips.clone(),
                port: number,
                node_port: node_ports
                    .then(|| port.node_port.and_then(|p| u16::try_from(p).ok()))
                    .flatten(),
                backends,
                remote,
                affinity_seconds: affinity,
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The backends of `port` of `service` from its `slices`: those reached directly and the
/// remote ones (see the module docs).
fn backends(
    service: &Service,
    port: &K8sPort,
    protocol: Protocol,
    slices: &[&EndpointSlice],
    ctx: &NodeContext,
) -> (Vec<Backend>, Vec<Backend>) {
    let spec = service.spec.as_ref();
    let mut all: Vec<(&Endpoint, Backend)> = Vec::new();
    for slice in slices {
        let target = slice.ports.iter().flatten().find(|p| {
            p.name.as_deref().unwrap_or_default() == port.name.as_deref().unwrap_or_default()
                && Protocol::parse(p.protocol.as_deref()) == Some(protocol)
        });
        let Some(target) = target
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
        else {
            continue;
        };
        for endpoint in slice.endpoints.iter().flatten() {
            for &ip in &endpoint.addresses {
                all.push((endpoint, Backend { ip, port: target }));
            }
        }
    }
    let conditions = |e: &Endpoint| e.conditions.unwrap_or_default();
    let ready: Vec<_> = all
        .iter()
        .filter(|(e, _)| conditions(e).ready != Some(false))
        .collect();
    let usable = if ready.is_empty() {
        all.iter()
            .filter(|(e, _)| {
                let c = conditions(e);
                c.serving == Some(true) && c.terminating == Some(true)
            })
            .collect()
    } else {
        ready
    };
    let here = |e: &Endpoint| e.node_name.as_deref() == Some(ctx.node.as_str());
    let local = spec.and_then(|s| s.internal_traffic_policy.as_deref()) == Some("Local");
    let in_group = |e: &Endpoint| {
        ctx.group
            .as_ref()
            .is_none_or(|members| e.node_name.as_ref().is_some_and(|n| members.contains(n)))
    };
    let topology = service.metadata.service_topology.as_deref() == Some(RANGE_NODEGROUP);
    let mut chosen: Vec<&(&Endpoint, Backend)> = usable
        .into_iter()
        .filter(|(e, _)| !local || here(e))
        .filter(|(e, _)| !topology || in_group(e))
        .collect();
    let same_zone = |e: &Endpoint| ctx.zone.is_some() && e.zone == ctx.zone;
    let prefer: Option<&dyn Fn(&Endpoint) -> bool> =
        match spec.and_then(|s| s.traffic_distribution.as_deref()) {
            Some("PreferSameNode") => Some(&here),
            Some("PreferClose" | "PreferSameZone") => Some(&same_zone),
            _ => None,
        };
    if let Some(prefer) = prefer
        && chosen.iter().any(|(e, _)| prefer(e))
    {
        chosen.retain(|(e, _)| prefer(e));
    }
    let (mut direct, mut remote) = (Vec::new(), Vec::new());
    for (e, b) in chosen {
        if ctx.reaches(b.ip, e.node_name.as_deref()) {
            direct.push(*b);
        } else if conditions(e).ready != Some(false) {
            // cloudhub dials only ready endpoints.
            remote.push(*b);
        }
    }
    for list in [&mut direct, &mut remote] {
        list.sort();
        list.dedup();
    }
    (direct, remote)
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
