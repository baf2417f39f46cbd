//! Pod addresses on the node's pod network, handed out by edgecore instead of the container
//! engine (the role of the kubelet's CNI `host-local` IPAM plugin).
//!
//! The engine's own IPAM gives an address to a container when it starts and takes it back
//! when it stops. That is enough for a sandbox, whose address is the pod's, but not for a pod
//! without a sandbox, whose one container holds the pod's network namespace itself: each
//! restart is a new container, and the pod's IP must not change (`status.podIPs` is fixed
//! for the pod's life). So every pod on the pod network gets its address here, once, and
//! every container that holds its network namespace (sandbox or not) is created with it
//! ([`ContainerSpec::ipv4_address`](verge_container_runtime::ContainerSpec::ipv4_address))
//! and carries it as a label
//! ([`POD_IP`](verge_container_runtime::labels::POD_IP)).
//!
//! The labels are the record: at start-up edged [`adopt`](PodIps::adopt)s the address of
//! every container of the node, so a pod keeps its address across edgecore restarts and
//! offline reboots, and no address held by a stopped container (a pod in crash-loop
//! back-off) is handed to another pod. Addresses are handed out round-robin, after the last
//! one given, as `host-local` does, so that a freed address is not reused at once (stale ARP
//! and conntrack entries of the previous pod).

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

/// The addresses given to pods, by pod uid; see the module docs.
#[derive(Debug, Default)]
pub struct PodIps {
    by_uid: HashMap<String, Ipv4Addr>,
    /// Addresses the engine refused as in use by containers that are not pods' (see
    /// [`PodIps::refuse`]); never handed out again while edgecore runs.
    foreign: HashSet<Ipv4Addr>,
    /// The last address handed out; the next search starts after it.
    last: Option<Ipv4Addr>,
}

/// Every address of `cidr` is taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no free address left in pod network {cidr} ({taken} pods hold one)")]
pub struct Exhausted {
    /// The pod network.
    pub cidr: Ipv4Net,
    /// How many addresses of it are held.
    pub taken: usize,
}

impl PodIps {
    /// Records that pod `uid` holds `ip` (read from a container's label at start-up). A pod
    /// holds one address: a second one for the same pod is ignored, as is an address another
    /// pod holds already. Returns whether it was recorded.
    pub fn adopt(&mut self, uid: &str, ip: Ipv4Addr) -> bool {
        if self.by_uid.contains_key(uid) || self.by_uid.values().any(|held| *held == ip) {
            return false;
        }
        self.by_uid.insert(uid.to_owned(), ip);
        true
    }

    /// The address of pod `uid` in `cidr`: the one it holds, else the next free one after
    /// the last handed out (never the network address, the broadcast address or the gateway,
    /// the first host address). An address the pod holds outside `cidr` (the Node's
    /// `podCIDR` changed) is given up for a new one.
    ///
    /// # Errors
    /// [`Exhausted`] when every address of `cidr` is held.
    pub fn assign(&mut self, uid: &str, cidr: Ipv4Net) -> Result<Ipv4Addr, Exhausted> {
        if let Some(ip) = self.by_uid.get(uid).copied() {
            if cidr.contains(&ip) {
                return Ok(ip);
            }
            self.by_uid.remove(uid);
        }
        let gateway = Ipv4Addr::from(u32::from(cidr.network()).saturating_add(1));
        let usable: Vec<Ipv4Addr> = cidr.hosts().filter(|ip| *ip != gateway).collect();
        let start = self
            .last
            .and_then(|last| usable.iter().position(|ip| *ip == last))
            .map_or(0, |i| i + 1);
        let free = (0..usable.len())
            .map(|i| usable[(start + i) % usable.len()])
            .find(|ip| !self.foreign.contains(ip) && !self.by_uid.values().any(|held| held == ip));
        let Some(ip) = free else {
            let taken = self.by_uid.values().filter(|ip| cidr.contains(*ip)).count()
                + self.foreign.iter().filter(|ip| cidr.contains(*ip)).count();
            return Err(Exhausted { cidr, taken });
        };
        self.by_uid.insert(uid.to_owned(), ip);
        self.last = Some(ip);
        Ok(ip)
    }

    /// The address pod `uid` holds, if any.
    pub fn get(&self, uid: &str) -> Option<Ipv4Addr> {
        self.by_uid.get(uid).copied()
    }

    /// The engine refused pod `uid`'s address `ip` as in use: a container that is not a pod
    /// of this node holds it (one started on the pod network by hand, or the engine gave it
    /// out itself). The address is not handed out again, and the pod gets a new one at its
    /// next [`assign`](Self::assign), as a kubelet's pod whose sandbox is made again does.
    pub fn refuse(&mut self, uid: &str, ip: Ipv4Addr) {
        self.foreign.insert(ip);
        if self.by_uid.get(uid) == Some(&ip) {
            self.by_uid.remove(uid);
        }
    }

    /// Gives pod `uid`'s address back (its containers are removed).
    pub fn release(&mut self, uid: &str) {
        self.by_uid.remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Ipv4Net {
        s.parse().expect("cidr")
    }

    #[test]
    fn addresses_skip_the_gateway_and_are_kept_per_pod() {
        let mut ips = PodIps::default();
        let cidr = net("10.244.1.0/24");
        let a = ips.assign("a", cidr).expect("a");
        assert_eq!(a, Ipv4Addr::new(10, 244, 1, 2));
        assert_eq!(ips.assign("a", cidr), Ok(a), "a pod keeps its address");
        assert_eq!(ips.assign("b", cidr), Ok(Ipv4Addr::new(10, 244, 1, 3)));
        assert_eq!(ips.get("b"), Some(Ipv4Addr::new(10, 244, 1, 3)));
    }

    #[test]
    fn freed_addresses_are_reused_last_and_a_full_network_is_an_error() {
        let mut ips = PodIps::default();
        // A /29: hosts .1-.6, .1 the gateway: five pod addresses.
        let cidr = net("10.0.0.0/29");
        for uid in ["a", "b", "c", "d", "e"] {
            ips.assign(uid, cidr).expect("free address");
        }
        let full = ips.assign("f", cidr).expect_err("full");
        assert_eq!(full.taken, 5);
        ips.release("b");
        assert_eq!(ips.assign("f", cidr), Ok(Ipv4Addr::new(10, 0, 0, 3)));
        ips.release("a");
        ips.release("c");
        // Round-robin: after .3 (the last given) comes .4, then .5 and .6 are held and the
        // search wraps to .2.
        assert_eq!(ips.assign("g", cidr), Ok(Ipv4Addr::new(10, 0, 0, 4)));
        assert_eq!(ips.assign("h", cidr), Ok(Ipv4Addr::new(10, 0, 0, 2)));
    }

    #[test]
    fn adopted_addresses_are_not_handed_out_twice() {
        let mut ips = PodIps::default();
        let cidr = net("10.244.1.0/24");
        assert!(ips.adopt("old", Ipv4Addr::new(10, 244, 1, 2)));
        assert!(
            !ips.adopt("other", Ipv4Addr::new(10, 244, 1, 2)),
            "held by old"
        );
        assert!(
            !ips.adopt("old", Ipv4Addr::new(10, 244, 1, 9)),
            "one per pod"
        );
        assert_eq!(ips.assign("new", cidr), Ok(Ipv4Addr::new(10, 244, 1, 3)));
        assert_eq!(ips.assign("old", cidr), Ok(Ipv4Addr::new(10, 244, 1, 2)));
        // An address held outside the pods is given up for another, and never handed out.
        ips.refuse("new", Ipv4Addr::new(10, 244, 1, 3));
        assert_eq!(ips.assign("new", cidr), Ok(Ipv4Addr::new(10, 244, 1, 4)));
        ips.release("new");
        assert_eq!(ips.assign("newer", cidr), Ok(Ipv4Addr::new(10, 244, 1, 5)));
        // The podCIDR changed: a new address in the new network.
        let moved = net("10.244.7.0/24");
        assert_eq!(ips.assign("old", moved), Ok(Ipv4Addr::new(10, 244, 7, 2)));
    }
}
