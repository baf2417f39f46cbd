//! The cluster's names as CoreDNS's `kubernetes` plugin answers them, from the Services and
//! EndpointSlices the node holds; pure.
//!
//! In the zone (`cluster.local` by default):
//! - `<service>.<ns>.svc.<zone>`: `A` of the cluster IP; of a headless Service the addresses of
//!   its ready endpoints (all of them with `publishNotReadyAddresses`); of an `ExternalName`
//!   Service a `CNAME` to its external name;
//! - `<hostname>.<service>.<ns>.svc.<zone>`: `A` of a headless Service's endpoint that has a
//!   hostname (a StatefulSet's pods);
//! - `_<port>._<proto>.<service>.<ns>.svc.<zone>`: `SRV` per named port, to the Service's name
//!   (or, headless, to each endpoint's name: its hostname or its address with dashes);
//! - `<a-b-c-d>.<ns>.pod.<zone>`: `A` a.b.c.d (CoreDNS's `pods insecure`, its default);
//! - any other name in the zone: `NXDOMAIN`; a name of the zone with no record of the asked
//!   type: no data. Names outside the zone are not ours (forwarded).
//!
//! In `in-addr.arpa`, as CoreDNS's `kubernetes <zone> in-addr.arpa` with `fallthrough`:
//! `d.c.b.a.in-addr.arpa` has a `PTR` to `<service>.<ns>.svc.<zone>` when a.b.c.d is a
//! Service's cluster IP, and to `<hostname or a-b-c-d>.<service>.<ns>.svc.<zone>` when it is a
//! published endpoint of a headless Service; any other address is not ours (forwarded).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use crate::catalog::objects::{EndpointSlice, Service};
use crate::services::model::SERVICE_NAME_LABEL;

/// Kubernetes' default cluster domain.
pub const DEFAULT_ZONE: &str = "cluster.local";

/// The record types asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryType {
    /// `A`.
    A,
    /// `AAAA` (never answered: IPv4 only so far).
    Aaaa,
    /// `SRV`.
    Srv,
    /// `CNAME`.
    Cname,
    /// `PTR`.
    Ptr,
    /// Any other type.
    Other,
}

/// One answer record (name and TTL are the caller's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Record {
    /// An IPv4 address.
    A(Ipv4Addr),
    /// An alias, fully qualified without the final dot.
    Cname(String),
    /// A reverse pointer to a name, fully qualified without the final dot.
    Ptr(String),
    /// A service location.
    Srv {
        /// The port.
        port: u16,
        /// The target, fully qualified without the final dot.
        target: String,
    },
}

/// What the zone says of a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The records (not empty).
    Records(Vec<Record>),
    /// The name exists, with no record of the asked type.
    NoData,
    /// The name does not exist in the zone.
    NxDomain,
    /// The name is outside the zone: forward it.
    NotOurs,
}

#[derive(Debug, Clone)]
struct Endpoint {
    ip: Ipv4Addr,
    hostname: Option<String>,
    ready: bool,
}

#[derive(Debug, Clone, Default)]
struct Entry {
    cluster_ip: Option<Ipv4Addr>,
    headless: bool,
    external_name: Option<String>,
    publish_not_ready: bool,
    /// Named ports: (name, protocol in lower case, port).
    ports: Vec<(String, String, u16)>,
    endpoints: Vec<Endpoint>,
}

impl Entry {
    fn published(&self) -> impl Iterator<Item = &Endpoint> {
        self.endpoints
            .iter()
            .filter(|e| e.ready || self.publish_not_ready)
    }
}

/// The zone's names; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct ClusterNames {
    zone: String,
    services: BTreeMap<(String, String), Entry>,
    /// `in-addr.arpa` names: cluster IPs and headless endpoints to their names.
    reverse: BTreeMap<Ipv4Addr, String>,
}

impl ClusterNames {
    /// The names of `services` and `slices` in `zone` (e.g. [`DEFAULT_ZONE`]).
    pub fn build<'a>(
        zone: &str,
        services: impl IntoIterator<Item = &'a Service>,
        slices: impl IntoIterator<Item = &'a EndpointSlice>,
    ) -> Self {
        let mut out = Self {
            zone: zone.trim_end_matches('.').to_ascii_lowercase(),
            services: BTreeMap::new(),
            reverse: BTreeMap::new(),
        };
        for service in services {
            let ns = service.metadata.namespace.clone().unwrap_or_default();
            let name = service.metadata.name.clone().unwrap_or_default();
            let Some(spec) = &service.spec else { continue };
            let cluster_ip = spec.cluster_ip.as_deref();
            let entry = Entry {
                cluster_ip: cluster_ip.and_then(|ip| ip.parse().ok()),
                headless: cluster_ip == Some("None"),
                external_name: (spec.type_.as_deref() == Some("ExternalName"))
                    .then(|| spec.external_name.clone())
                    .flatten()
                    .map(|n| n.trim_end_matches('.').to_ascii_lowercase()),
                publish_not_ready: spec.publish_not_ready_addresses == Some(true),
                ports: spec
                    .ports
                    .iter()
                    .flatten()
                    .filter_map(|p| {
                        let name = p.name.clone().filter(|n| !n.is_empty())?;
                        let proto = p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase();
                        Some((name, proto, u16::try_from(p.port).ok()?))
                    })
                    .collect(),
                endpoints: Vec::new(),
            };
            out.services
                .insert((ns.to_ascii_lowercase(), name.to_ascii_lowercase()), entry);
        }
        for slice in slices.into_iter().filter(|s| s.address_type == "IPv4") {
            let labels = slice.metadata.labels.as_ref();
            let Some(service) = labels.and_then(|l| l.get(SERVICE_NAME_LABEL)) else {
                continue;
            };
            let ns = slice.metadata.namespace.clone().unwrap_or_default();
            let Some(entry) = out.services.get_mut(&(ns, service.clone())) else {
                continue;
            };
            for e in slice.endpoints.iter().flatten() {
                let ready = e.conditions.as_ref().and_then(|c| c.ready) != Some(false);
                for address in &e.addresses {
                    entry.endpoints.push(Endpoint {
                        ip: *address,
                        hostname: e.hostname.clone().map(|h| h.to_ascii_lowercase()),
                        ready,
                    });
                }
            }
        }
        out.reverse = out.reverse_names();
        out
    }

    /// The `PTR` targets: each cluster IP to its Service's name, each published endpoint of a
    /// headless Service to its endpoint name (the first Service in name order wins an address
    /// two of them share).
    fn reverse_names(&self) -> BTreeMap<Ipv4Addr, String> {
        let mut reverse = BTreeMap::new();
        for ((ns, service), entry) in &self.services {
            let fqdn = format!("{service}.{ns}.svc.{}", self.zone);
            if let Some(ip) = entry.cluster_ip.filter(|_| entry.external_name.is_none()) {
                reverse.entry(ip).or_insert_with(|| fqdn.clone());
            }
            if entry.headless {
                for e in entry.published() {
                    reverse
                        .entry(e.ip)
                        .or_insert_with(|| format!("{}.{fqdn}", endpoint_label(e)));
                }
            }
        }
        reverse
    }

    /// The answer to `name` (with or without the final dot, any case) of type `qtype`.
    pub fn answer(&self, name: &str, qtype: QueryType) -> Answer {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(reversed) = name.strip_suffix(".in-addr.arpa") {
            return self.pointer(reversed, qtype);
        }
        let Some(rest) = name.strip_suffix(&self.zone).and_then(|r| {
            if r.is_empty() {
                Some("")
            } else {
                r.strip_suffix('.')
            }
        }) else {
            return Answer::NotOurs;
        };
        let labels: Vec<&str> = if rest.is_empty() {
            Vec::new()
        } else {
            rest.split('.').collect()
        };
        match labels.as_slice() {
            [] | ["svc"] | ["pod"] => Answer::NoData,
            [_ns, "svc"] | [_ns, "pod"] => Answer::NoData,
            [ip, _ns, "pod"] => match dashed_ip(ip) {
                Some(ip) if qtype == QueryType::A => Answer::Records(vec![Record::A(ip)]),
                Some(_) => Answer::NoData,
                None => Answer::NxDomain,
            },
            [service, ns, "svc"] => self.service(ns, service, qtype),
            [port, proto, service, ns, "svc"]
                if port.starts_with('_') && proto.starts_with('_') =>
            {
                self.srv(ns, service, &port[1..], &proto[1..], qtype)
            }
            [host, service, ns, "svc"] => self.endpoint(ns, service, host, qtype),
            _ => Answer::NxDomain,
        }
    }

    /// `reversed` is `d.c.b.a` of `d.c.b.a.in-addr.arpa`.
    fn pointer(&self, reversed: &str, qtype: QueryType) -> Answer {
        let mut octets: Vec<&str> = reversed.split('.').collect();
        octets.reverse();
        let Some(target) = octets
            .join(".")
            .parse::<Ipv4Addr>()
            .ok()
            .and_then(|ip| self.reverse.get(&ip))
        else {
            return Answer::NotOurs;
        };
        if qtype == QueryType::Ptr {
            Answer::Records(vec![Record::Ptr(target.clone())])
        } else {
            Answer::NoData
        }
    }

    fn entry(&self, ns: &str, service: &str) -> Option<&Entry> {
        self.services.get(&(ns.to_owned(), service.to_owned()))
    }

    fn service(&self, ns: &str, service: &str, qtype: QueryType) -> Answer {
        let Some(entry) = self.entry(ns, service) else {
            return Answer::NxDomain;
        };
        let records: Vec<Record> = if let Some(external) = &entry.external_name {
            if matches!(qtype, QueryType::A | QueryType::Aaaa | QueryType::Cname) {
                vec![Record::Cname(external.clone())]
            } else {
                Vec::new()
            }
        } else if qtype == QueryType::A {
            if entry.headless {
                let mut ips: Vec<Record> = entry.published().map(|e| Record::A(e.ip)).collect();
                ips.sort();
                ips.dedup();
                ips
            } else {
                entry.cluster_ip.map(Record::A).into_iter().collect()
            }
        } else if qtype == QueryType::Srv {
            let fqdn = format!("{service}.{ns}.svc.{}", self.zone);
            entry
                .ports
                .iter()
                .map(|(_, _, port)| Record::Srv {
                    port: *port,
                    target: fqdn.clone(),
                })
                .collect()
        } else {
            Vec::new()
        };
        records_or_no_data(records)
    }

    fn srv(&self, ns: &str, service: &str, port: &str, proto: &str, qtype: QueryType) -> Answer {
        let Some(entry) = self.entry(ns, service) else {
            return Answer::NxDomain;
        };
        let Some((_, _, number)) = entry.ports.iter().find(|(n, p, _)| n == port && p == proto)
        else {
            return Answer::NxDomain;
        };
        if qtype != QueryType::Srv {
            return Answer::NoData;
        }
        let base = format!("{service}.{ns}.svc.{}", self.zone);
        let records = if entry.headless {
            entry
                .published()
                .map(|e| Record::Srv {
                    port: *number,
                    target: format!("{}.{base}", endpoint_label(e)),
                })
                .collect()
        } else {
            vec![Record::Srv {
                port: *number,
                target: base,
            }]
        };
        records_or_no_data(records)
    }

    fn endpoint(&self, ns: &str, service: &str, host: &str, qtype: QueryType) -> Answer {
        let Some(entry) = self.entry(ns, service).filter(|e| e.headless) else {
            return Answer::NxDomain;
        };
        let ips: Vec<Record> = entry
            .published()
            .filter(|e| endpoint_label(e) == host)
            .map(|e| Record::A(e.ip))
            .collect();
        if ips.is_empty() {
            Answer::NxDomain
        } else if qtype == QueryType::A {
            Answer::Records(ips)
        } else {
            Answer::NoData
        }
    }
}

fn records_or_no_data(records: Vec<Record>) -> Answer {
    if records.is_empty() {
        Answer::NoData
    } else {
        Answer::Records(records)
    }
}

/// An endpoint's label: its hostname, else its address with dashes.
fn endpoint_label(e: &Endpoint) -> String {
    e.hostname
        .clone()
        .unwrap_or_else(|| e.ip.to_string().replace('.', "-"))
}

/// `10-244-1-5` as an address.
fn dashed_ip(label: &str) -> Option<Ipv4Addr> {
    label.replace('-', ".").parse().ok()
}

#[cfg(test)]
#[path = "names_tests.rs"]
mod tests;
