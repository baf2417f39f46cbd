//! The ControllerHub client shared by Verge's cloud controllers (edgecontroller,
//! devicecontroller): they attach to cloudhub in exactly the same way and differ only in
//! what they do with the nodes' messages.
//!
//! A controller attaches to every cloudhub replica (static list, or the EndpointSlices of a
//! Service watched through the API server) over TLS verified against the Verge CA, with a service-account token for the
//! ControllerHub audience (TokenRequest API, or a file) as `authorization: Bearer`; its
//! hello names the message group it serves. Each stream is re-attached with jittered
//! exponential backoff. Session events tell which replica holds each node, so downstream
//! messages go to that replica and upstream messages are answered where they came from
//! (architecture.md §1, docs/protocol.md "Several cloudhub replicas").
//!
//! A controller's replicas elect a leader on a `coordination.k8s.io` Lease ([`leader`],
//! client-go's algorithm): only the leader attaches and acts.
//!
//! # Layout
//! - [`binary`]: the shared `main` of the controllers' binaries ([`binary::Flags`],
//!   [`binary::main`]).
//! - [`config`]: the YAML [`Config`] every controller reads.
//! - [`hub_auth`]: the Verge CA and the bearer token.
//! - [`hub`]: one `ControllerHub.Attach` client stream per replica ([`hub::Link`],
//!   [`hub::HubEvent`]), re-attached with backoff.
//! - [`leader`]: leader election between a controller's replicas on a Lease
//!   ([`leader::Elector`], [`leader::Leadership`]).
//! - [`metrics`]: the Prometheus series every controller serves on `/metrics`.
//! - [`reflect`]: watch caches (reflector stores reporting their changes as the
//!   controller's cache events).
//! - [`discovery`]: cloudhub replicas from a Service's EndpointSlices (pure).
//! - [`replicas`]: the set of replicas to attach to (static and EndpointSlice discovery).
//! - [`service`]: the frame of a controller's `run` ([`service::Attached`]): attach,
//!   dispatch until shutdown, drain.
//! - [`sessions`]: the node -> replica link routing table.
//! - [`dispatch`]: routes hub events: sessions and answers to the controller's downstream
//!   side ([`dispatch::Input`]), upstream messages to one ordered worker per node running
//!   the controller's [`dispatch::Handler`].
//! - [`downstream`]: the downstream task ([`downstream::run`]) over the controller's
//!   [`downstream::Downstream`].
//! - [`retry`]: re-diff backoff after delivery errors (downstream).
//! - [`sender`]: per-node downstream state ([`sender::NodeState`]): what was sent, what to
//!   send next, over the controller's [`sender::NodeObjects`].
//! - [`diff`]: object versions and the desired-vs-held diff of a node's resync (pure).
//! - [`fingerprint`]: content hashes without status, so status changes are not echoed.
//! - [`error`]: the crate's [`Error`].

pub mod binary;
pub mod config;
mod deliveries;
pub mod diff;
pub mod discovery;
pub mod dispatch;
pub mod downstream;
pub mod error;
pub mod fingerprint;
pub mod hub;
pub mod hub_auth;
pub mod leader;
pub mod metrics;
pub mod reflect;
pub mod replicas;
pub mod retry;
pub mod sender;
pub mod service;
pub mod sessions;

pub use config::{Config, HubAuthConfig};
pub use error::{Error, Result};

use verge_core::{Envelope, Group, Module, Outcome};

/// Who a controller is on the ControllerHub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Its name: the default `ControllerHello.name` ([`Config::name`]) and the name of its
    /// default service account in `verge-system` ([`HubAuthConfig::service_account`]).
    pub name: &'static str,
    /// The module its messages come from (`route.source`).
    pub module: Module,
    /// The message group it serves: sent in the hello (cloudhub forwards it the upstream
    /// messages of that group) and set on the answers it makes.
    pub group: Group,
}

impl Identity {
    /// An answer (`ack`/`response`/`error`) to `message`: a new id, `parent_id` = the
    /// message's id, this controller's module and group, the same resource path; `body` is a
    /// response's object.
    pub fn answer(&self, message: &Envelope, outcome: Outcome, body: Vec<u8>) -> Envelope {
        let mut reply = message.answer(self.module.clone(), outcome, body);
        reply.group = self.group;
        reply
    }
}
