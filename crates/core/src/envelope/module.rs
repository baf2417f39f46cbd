//! [`Module`]: the component that produced a message (`route.source`).

use std::fmt;
use std::str::FromStr;

use crate::{Error, Result};

/// The module a message comes from (KubeEdge: the beehive module name in `Router.Source`).
///
/// The names are KubeEdge's. A name Verge does not know is kept as [`Module::Other`], so
/// third-party modules (mappers, other controllers) can talk through the hub and their
/// messages are forwarded unchanged; only an empty source is refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Module {
    /// `"edgehub"`: the edge end of the stream (keepalives).
    EdgeHub,
    /// `"metamanager"`: the edge store (acks and errors of downstream objects).
    MetaManager,
    /// `"edged"`: the pod manager (pod status, events, node reports, queries).
    Edged,
    /// `"node"`: the node agent. (Verge's node agent reports as `edged`, as the kubelet does.)
    Node,
    /// `"devicetwin"`: device twins on the edge (planned).
    DeviceTwin,
    /// `"cloudhub"`: the hub itself (keepalive answers, routing errors).
    CloudHub,
    /// `"edgecontroller"`: Kubernetes objects down, their reports applied up.
    EdgeController,
    /// `"devicecontroller"`: devices and device models (planned).
    DeviceController,
    /// `"fleetcontroller"`: NodeGroups, EdgeApplications and fleet jobs.
    FleetController,
    /// `"taskmanager"`: the edge's runner of fleet tasks (KubeEdge's task manager).
    TaskManager,
    /// Any other non-empty name, as received.
    Other(String),
}

impl Module {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::EdgeHub => "edgehub",
            Self::MetaManager => "metamanager",
            Self::Edged => "edged",
            Self::Node => "node",
            Self::DeviceTwin => "devicetwin",
            Self::CloudHub => "cloudhub",
            Self::EdgeController => "edgecontroller",
            Self::DeviceController => "devicecontroller",
            Self::FleetController => "fleetcontroller",
            Self::TaskManager => "taskmanager",
            Self::Other(name) => name,
        }
    }
}

impl FromStr for Module {
    type Err = Error;

    /// Parses a wire name; unknown names become [`Module::Other`].
    ///
    /// # Errors
    /// [`Error::EmptySource`] for `""`.
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "" => return Err(Error::EmptySource),
            "edgehub" => Self::EdgeHub,
            "metamanager" => Self::MetaManager,
            "edged" => Self::Edged,
            "node" => Self::Node,
            "devicetwin" => Self::DeviceTwin,
            "cloudhub" => Self::CloudHub,
            "edgecontroller" => Self::EdgeController,
            "devicecontroller" => Self::DeviceController,
            "fleetcontroller" => Self::FleetController,
            "taskmanager" => Self::TaskManager,
            other => Self::Other(other.to_owned()),
        })
    }
}

impl fmt::Display for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
