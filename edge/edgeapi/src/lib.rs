//! The edge API (DESIGN §15; architecture.md §13): the Kubernetes API on the edge node for
//! the in-cluster clients of its pods (operators, agents, anything with client-go's, kube-rs'
//! or the Python client's in-cluster configuration), in the place of KubeEdge's MetaServer.
//!
//! Pods reach it at the `kubernetes` Service (`KUBERNETES_SERVICE_HOST`/`PORT`): the
//! Service proxy DNATs that Service's HTTPS port to this listener on the pod network's
//! gateway ([`config::DEFAULT_PORT`]). It presents a serving certificate the cluster CA
//! signed for the `kubernetes` Service's names and cluster IP ([`trust`]), so pods verify it
//! with the unchanged `ca.crt` of their `kube-root-ca.crt` as they verify the API server.
//!
//! Online, every request goes on to the real API server ([`upstream`]) through cloudhub over
//! the node's session (`EdgeHub.Dial` to the Service's ready endpoint, TLS verified with the
//! cluster CA), with the pod's own `Authorization`: authentication, authorization, admission
//! and every answer are the API server's; the edge API learns from each answer which tokens
//! the API server authenticated, what it allowed whom, and keeps the answers to reads
//! ([`cache`]). Offline, a read is answered from what was kept when the API server's own
//! decision allowed that user that request ([`handler`]); a write gets a Kubernetes `Status`
//! 503 whose message names the cut link ([`status`]).
//!
//! # Layout
//! - [`config`]: the `edgeApi:` section of edgecore's configuration.
//! - [`authn`]: the bearer token and its claims.
//! - [`issuer`]: the token issuer's keys, for verifying tokens offline.
//! - [`cache`]: tokens, decisions and responses kept for offline answers (redb).
//! - [`trust`]: the serving certificate, signed by the cluster CA.
//! - [`upstream`]: the connection to the API server over the session.
//! - [`request`]: what a request asks for (the API server's request info).
//! - [`server`]: the task, the listener and TLS.
//! - [`handler`]: one request, online or offline.
//! - [`local`]: answers from what the node holds by design (metamanager's store).
//! - [`watch`]: watches served offline.
//! - [`selectors`]: label and field selectors.
//! - [`status`]: Kubernetes `Status` answers.

pub mod authn;
pub mod cache;
pub mod config;
pub mod handler;
pub mod issuer;
pub mod local;
pub mod request;
pub mod selectors;
pub mod server;
pub mod status;
pub mod trust;
pub mod upstream;
pub mod watch;

pub use config::EdgeApiConfig;
pub use server::EdgeApi;
