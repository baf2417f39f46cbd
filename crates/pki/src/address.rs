//! A node's stream address: the IP address an edge node advertises as its `Hostname`, so
//! that the API server, metrics-server and anything else that dials a kubelet by its Node's
//! addresses reaches edgecore through cloudhub (architecture.md §10).
//!
//! The API server proxies `/api/v1/nodes/<node>/proxy/...` only to an address that its own
//! resolver turns into global unicast IPs (`isProxyableHostname` in kube-apiserver's node
//! registry): an edge's name never resolves on a control-plane host, and its `InternalIP` is
//! often the same private address at every site. A stream address is a unique IPv6 literal
//! derived from the node name: the 48-bit unique-local prefix [`STREAM_PREFIX`]
//! (`fd56:6572:6765::/48`, "Verge" in ASCII) followed by the first 80 bits of SHA-256 of the
//! name. It resolves to itself, is global unicast to Go's `net.IP`, and is never routed:
//! every connection to it leaves the API server as an egress `CONNECT [<address>]:<port>`,
//! which cloudhub maps back to the node's session. Two names share an address with
//! probability about n²/2⁸¹ (10⁻¹⁴ for 100,000 nodes).

use std::net::Ipv6Addr;

/// The first 48 bits of every stream address: `fd56:6572:6765::/48`.
pub const STREAM_PREFIX: [u8; 6] = [0xfd, 0x56, 0x65, 0x72, 0x67, 0x65];

/// The stream address of node `node` (any string; node names are DNS-1123 subdomains).
pub fn stream_address(node: &str) -> Ipv6Addr {
    let digest = ring::digest::digest(&ring::digest::SHA256, node.as_bytes());
    let mut octets = [0u8; 16];
    octets[..6].copy_from_slice(&STREAM_PREFIX);
    octets[6..].copy_from_slice(&digest.as_ref()[..10]);
    Ipv6Addr::from(octets)
}

/// Whether `address` lies in [`STREAM_PREFIX`], i.e. can only be some edge node's stream
/// address.
pub fn is_stream_address(address: &Ipv6Addr) -> bool {
    address.octets()[..6] == STREAM_PREFIX
}

/// The stream address `host` names, if it is one: an IPv6 literal in [`STREAM_PREFIX`],
/// with or without the brackets of a URI authority (`[fd56:...]`).
pub fn parse_stream_address(host: &str) -> Option<Ipv6Addr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse::<Ipv6Addr>().ok().filter(is_stream_address)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_stable_distinct_and_in_the_prefix() {
        let a = stream_address("edge-1");
        assert_eq!(a, stream_address("edge-1"));
        assert_ne!(a, stream_address("edge-2"));
        assert!(is_stream_address(&a));
        assert!(a.to_string().starts_with("fd56:6572:6765:"), "{a}");
        // Global unicast as Go sees it: not loopback, link-local, multicast or unspecified.
        assert!(!a.is_loopback() && !a.is_multicast() && !a.is_unspecified());
        assert!(!a.is_unicast_link_local());
    }

    #[test]
    fn parses_only_stream_addresses() {
        let a = stream_address("edge-1");
        assert_eq!(parse_stream_address(&a.to_string()), Some(a));
        assert_eq!(parse_stream_address(&format!("[{a}]")), Some(a));
        assert_eq!(parse_stream_address("fd00::1"), None);
        assert_eq!(parse_stream_address("edge-1"), None);
        assert_eq!(parse_stream_address("10.0.0.1"), None);
        assert_eq!(parse_stream_address("[fd56:6572:6765::1"), None);
    }
}
