//! Operations and controller groups of a message route (KubeEdge: beehive `Router`).

use std::fmt;
use std::str::FromStr;

use crate::{AppGroup, Error, Result};

/// What a message does. The wire form is the lower-case name (`"insert"`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Create an object (cloud -> edge: a new object; edge -> cloud: register, e.g. a node).
    Insert,
    /// Replace an object with the carried full copy (or its status, for status types).
    Update,
    /// Apply a JSON merge patch (RFC 7386) carried in `content`.
    Patch,
    /// Delete an object. Edge -> cloud: a pod deletion the edge completed.
    Delete,
    /// Ask for an object; answered by `Response` or `Error` with `parent_id` set.
    Query,
    /// Answer to a `Query`; `content` holds the object.
    Response,
    /// Failure answer to a message; `content` holds a UTF-8 reason.
    Error,
    /// Acknowledges the message named by `parent_id`: the receiver committed it (edge) or the
    /// API server accepted it (controller).
    Ack,
    /// Application-level liveness probe of the stream; carries nothing.
    Keepalive,
    /// A full inventory of the edge (`content` is a protobuf `Inventory`).
    Resync,
}

impl Operation {
    /// Whether this answers another message (`ack`, `response`, `error`: `parent_id` names
    /// it, and the resource may be empty).
    pub const fn is_answer(self) -> bool {
        matches!(self, Self::Ack | Self::Response | Self::Error)
    }

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Insert => "insert",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::Query => "query",
            Self::Response => "response",
            Self::Error => "error",
            Self::Ack => "ack",
            Self::Keepalive => "keepalive",
            Self::Resync => "resync",
        }
    }
}

impl FromStr for Operation {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "insert" => Self::Insert,
            "update" => Self::Update,
            "patch" => Self::Patch,
            "delete" => Self::Delete,
            "query" => Self::Query,
            "response" => Self::Response,
            "error" => Self::Error,
            "ack" => Self::Ack,
            "keepalive" => Self::Keepalive,
            "resync" => Self::Resync,
            other => return Err(Error::UnknownOperation(other.to_owned())),
        })
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The cloud-side handler of a message (KubeEdge: the router group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    /// Kubernetes resources: pods, nodes, configmaps, secrets, leases, events. Served by
    /// edgecontroller.
    Resource,
    /// Devices and device models. Served by devicecontroller.
    Device,
    /// Cloudhub itself (keepalives); never forwarded to a controller.
    Hub,
    /// Fleet operations (KubeEdge's NodeUpgradeJob, ImagePrePullJob, ConfigUpdateJob):
    /// fleetcontroller's group. No message carries it yet.
    Fleet,
    /// A third party's group, served by its own controller on ControllerHub and by edge apps
    /// over MQTT on the edge (`verge/apps/<group>/...`).
    App(AppGroup),
}

impl Group {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Resource => "resource",
            Self::Device => "device",
            Self::Hub => "hub",
            Self::Fleet => "fleet",
            Self::App(group) => group.as_str(),
        }
    }

    /// The value of a metrics `group` label: the wire name of Verge's own groups, `"app"`
    /// for every third-party group (their names are not bounded in number).
    pub const fn metric_label(&self) -> &'static str {
        match self {
            Self::Resource => "resource",
            Self::Device => "device",
            Self::Hub => "hub",
            Self::Fleet => "fleet",
            Self::App(_) => "app",
        }
    }

    /// Whether this is one of Verge's own groups (served by Verge's controllers or cloudhub).
    pub const fn is_verge(&self) -> bool {
        !matches!(self, Self::App(_))
    }
}

impl FromStr for Group {
    type Err = Error;

    /// Verge's own names, or an [`AppGroup`] for a name with a dot.
    ///
    /// # Errors
    /// [`Error::UnknownGroup`] for a name without a dot that is not Verge's;
    /// [`Error::InvalidGroup`] for a malformed or reserved third-party name.
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "resource" => Self::Resource,
            "device" => Self::Device,
            "hub" => Self::Hub,
            "fleet" => Self::Fleet,
            other if other.contains('.') => Self::App(other.parse()?),
            other => return Err(Error::UnknownGroup(other.to_owned())),
        })
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_round_trip() {
        for op in [
            Operation::Insert,
            Operation::Update,
            Operation::Patch,
            Operation::Delete,
            Operation::Query,
            Operation::Response,
            Operation::Error,
            Operation::Ack,
            Operation::Keepalive,
            Operation::Resync,
        ] {
            assert_eq!(op.as_str().parse::<Operation>(), Ok(op));
        }
        assert!("frobnicate".parse::<Operation>().is_err());
    }

    #[test]
    fn groups_round_trip() {
        for g in [Group::Resource, Group::Device, Group::Hub, Group::Fleet] {
            assert_eq!(g.as_str().parse::<Group>(), Ok(g));
        }
        assert_eq!("x".parse::<Group>(), Err(Error::UnknownGroup("x".into())));
        let app: Group = "robots.example.com".parse().expect("third-party group");
        assert_eq!(app.as_str(), "robots.example.com");
        assert_eq!(app.to_string().parse::<Group>(), Ok(app));
        assert!(!app.is_verge() && Group::Resource.is_verge());
        assert_eq!(app.metric_label(), "app");
    }

    #[test]
    fn third_party_groups_are_dns_subdomains_outside_verge_io() {
        for bad in [
            "Robots.example.com",
            "robots..example.com",
            ".example.com",
            "example.com.",
            "-a.example.com",
            "a_b.example.com",
            "verge.io",
            "apps.verge.io",
            "a/b.example.com",
        ] {
            assert!(
                matches!(bad.parse::<Group>(), Err(Error::InvalidGroup { .. })),
                "{bad}"
            );
        }
        let long = format!("{}.example.com", "a".repeat(60));
        assert!(matches!(
            long.parse::<Group>(),
            Err(Error::InvalidGroup { .. })
        ));
        let max = format!("{}.io", "a".repeat(crate::app::MAX_NAME_LEN - 3));
        assert_eq!(max.parse::<Group>().map(|g| g.as_str().len()), Ok(63));
        assert!("robots.example.com".parse::<Group>().is_ok());
        assert!("a-1.b2.io".parse::<Group>().is_ok());
    }
}
