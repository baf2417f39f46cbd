//! The pod network of an edge node: a bridge network of the container engine on the Node's
//! `spec.podCIDR`.
//!
//! kube-controller-manager's range allocator (`--allocate-node-cidrs`, kubeadm's
//! `--pod-network-cidr`) gives every Node, cloud or edge, a CIDR of its own from the
//! cluster CIDR, one at a time as the single leader, so edgecore needs no allocation state of
//! its own and edge pod IPs never collide with cloud pod IPs. edgecore reads its Node's
//! `spec.podCIDR` from the Node object edgecontroller sends down (kept in redb, so it is
//! known offline) and makes the network: the engine's IPAM hands each pod sandbox an address
//! in it, the first address is the gateway on the node's bridge, and the address lives as
//! long as the sandbox (a container restart keeps it). Traffic leaving the node from the pod
//! network is masqueraded, as Docker does for its default bridge.
//!
//! Names: the network is `verge-pods-<node>` and its bridge device `vg` followed by eight hex
//! digits of a 32-bit FNV-1a hash of the node name (device names have at most 15 bytes), so
//! several edgecores sharing one engine (the test kit's) each have their own.

use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use verge_container_runtime::{ContainerRuntime, NetworkEnsured, NetworkSpec};

use crate::{Error, Result};

/// The smallest pod network: a /30 leaves one address for a pod besides the gateway.
const MAX_PREFIX: u8 = 30;

/// The pod network of one node; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodNetwork {
    cidr: Ipv4Net,
    spec: NetworkSpec,
}

impl PodNetwork {
    /// The pod network of node `node` whose Node has `spec.podCIDR` `pod_cidr` (e.g.
    /// `10.244.3.0/24`).
    ///
    /// # Errors
    /// [`Error::PodCidr`] when `pod_cidr` is not an IPv4 network address with a prefix of at
    /// most /30 (IPv6 pod networks are not supported yet).
    pub fn new(node: &str, pod_cidr: &str) -> Result<Self> {
        let invalid = |reason: &str| Error::PodCidr {
            node: node.to_owned(),
            cidr: pod_cidr.to_owned(),
            reason: reason.to_owned(),
        };
        let cidr: Ipv4Net = pod_cidr
            .parse()
            .map_err(|_| invalid("not an IPv4 CIDR (IPv6 pod networks are not supported)"))?;
        if cidr.network() != cidr.addr() {
            return Err(invalid("host bits are set"));
        }
        if cidr.prefix_len() > MAX_PREFIX {
            return Err(invalid("smaller than a /30"));
        }
        let gateway = gateway_of(cidr);
        Ok(Self {
            cidr,
            spec: NetworkSpec {
                name: network_name(node),
                bridge: bridge_name(node),
                subnet: cidr.to_string(),
                gateway: gateway.to_string(),
                masquerade: true,
            },
        })
    }

    /// The pod CIDR.
    pub fn cidr(&self) -> Ipv4Net {
        self.cidr
    }

    /// The network as the container engine makes it.
    pub fn spec(&self) -> &NetworkSpec {
        &self.spec
    }

    /// The network's name, which pod sandboxes join.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Whether `ip` is an address of this network.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        self.cidr.contains(&ip)
    }

    /// Turns on hairpin mode on every port of the network's bridge
    /// (`/sys/class/net/<bridge>/brif/*/hairpin_mode`), so a pod reaching itself through its
    /// Service gets its own packets back: with `br_netfilter` a DNATed packet whose backend
    /// sits behind the port it came in on is bridged back out of that port (the kubelet's
    /// `hairpinMode: hairpin-veth`). Docker sets it only without its userland proxy, so edged
    /// calls this after each sandbox start. Returns how many ports were changed.
    ///
    /// # Errors
    /// The bridge's port directory cannot be read or a port's file written (not root).
    pub fn enable_hairpin(&self) -> std::io::Result<usize> {
        let dir = std::path::Path::new("/sys/class/net")
            .join(&self.spec.bridge)
            .join("brif");
        let mut changed = 0;
        for port in std::fs::read_dir(dir)? {
            let file = port?.path().join("hairpin_mode");
            if std::fs::read_to_string(&file)?.trim() != "1" {
                std::fs::write(&file, "1")?;
                changed += 1;
            }
        }
        Ok(changed)
    }

    /// Makes the network in `runtime` (or finds it made), replacing a network of the same
    /// name on another CIDR (the Node was made anew) when no container uses it any more.
    ///
    /// # Errors
    /// [`Error::Runtime`] when the engine refuses (e.g. the CIDR overlaps another network of
    /// the engine, or the old network still has containers).
    pub async fn ensure<R: ContainerRuntime>(&self, runtime: &R) -> Result<NetworkEnsured> {
        runtime
            .ensure_network(&self.spec)
            .await
            .map_err(|source| Error::Runtime {
                network: self.spec.name.clone(),
                source,
            })
    }
}

/// The first host address of `cidr`, the gateway on the node's bridge.
fn gateway_of(cidr: Ipv4Net) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(cidr.network()).saturating_add(1))
}

/// `verge-pods-<node>`.
pub fn network_name(node: &str) -> String {
    format!("verge-pods-{node}")
}

/// `vg` and eight hex digits of the FNV-1a hash of `node` (10 bytes, within the kernel's
/// 15-byte limit for device names).
pub fn bridge_name(node: &str) -> String {
    use std::hash::Hasher as _;
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(node.as_bytes());
    let hash = hasher.finish();
    format!("vg{:08x}", (hash ^ (hash >> 32)) & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;
    use verge_container_runtime::fake::FakeRuntime;

    #[test]
    fn a_pod_cidr_makes_a_network_with_its_gateway() {
        let net = PodNetwork::new("edge-1", "10.244.3.0/24").expect("valid");
        assert_eq!(net.spec().subnet, "10.244.3.0/24");
        assert_eq!(net.spec().gateway, "10.244.3.1");
        assert_eq!(net.name(), "verge-pods-edge-1");
        assert!(net.spec().bridge.len() <= 15, "{}", net.spec().bridge);
        assert!(net.contains(Ipv4Addr::new(10, 244, 3, 77)));
        assert!(!net.contains(Ipv4Addr::new(10, 244, 4, 1)));
        assert_ne!(bridge_name("edge-1"), bridge_name("edge-2"));
        assert_eq!(bridge_name("edge-1"), bridge_name("edge-1"));
    }

    #[test]
    fn unusable_pod_cidrs_are_refused_with_the_reason() {
        for (cidr, reason) in [
            ("10.244.3.1/24", "host bits"),
            ("10.244.3.0/31", "smaller than a /30"),
            ("fd00::/64", "IPv6"),
            ("banana", "not an IPv4 CIDR"),
        ] {
            let e = PodNetwork::new("n", cidr).expect_err(cidr).to_string();
            assert!(e.contains(reason), "{cidr}: {e}");
        }
    }

    #[tokio::test]
    async fn ensuring_twice_finds_the_network_and_a_new_cidr_replaces_it() {
        let runtime = FakeRuntime::new("n");
        let first = PodNetwork::new("n", "10.244.3.0/24").expect("valid");
        assert_eq!(
            first.ensure(&runtime).await.expect("made"),
            NetworkEnsured::Created
        );
        assert_eq!(
            first.ensure(&runtime).await.expect("found"),
            NetworkEnsured::Existing
        );
        let second = PodNetwork::new("n", "10.244.9.0/24").expect("valid");
        assert_eq!(
            second.ensure(&runtime).await.expect("replaced"),
            NetworkEnsured::Replaced
        );
        assert_eq!(runtime.networks()["verge-pods-n"].subnet, "10.244.9.0/24");
    }
}
