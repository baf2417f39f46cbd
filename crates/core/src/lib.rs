//! The Verge message model, shared by cloud services and edgecore. Types only, no I/O.
//!
//! # Layout
//! - [`resource`]: resource paths (`node/<node>/<ns>/<type>/<name>` in the cloud,
//!   `<ns>/<type>/<name>` on the edge) parsed once into a typed [`ResourceKey`].
//! - [`envelope`]: the typed message [`Envelope`] (id, source [`Module`], [`Kind`], trace
//!   context, body) every component works on; `verge-proto` converts it at stream ends.
//! - [`route`]: [`Operation`]s and controller [`Group`]s of a message route.
//! - [`version`]: resourceVersion comparison used to ignore stale objects.
//! - [`config`]: strict YAML configuration parsing shared by every binary.
//! - [`well_known`]: label and namespace names both sides use ([`EDGE_NODE_LABEL`],
//!   [`NODE_LEASE_NAMESPACE`]).
//! - [`error`]: the crate's [`Error`].

pub mod app;
pub mod config;
pub mod envelope;
pub mod error;
pub mod resource;
pub mod route;
pub mod task;
pub mod version;
pub mod well_known;

pub use app::{AppGroup, AppType};
pub use config::{ConfigError, from_yaml};
pub use envelope::{
    Envelope, Kind, MessageId, Module, ObjectVersion, Outcome, TraceContext, Write, now_ms,
};
pub use error::{Error, Result};
pub use resource::{CLUSTER_SCOPE, LIST_NAME, NodeResource, ResourceKey, ResourceType};
pub use route::{Group, Operation};
pub use version::is_newer;
pub use well_known::{EDGE_NODE_LABEL, NODE_LEASE_NAMESPACE};
