//! The edge store: edgecore's one redb file and every table in it (KubeEdge: metamanager's
//! sqlite database, which every edge module reads). It is the bottom of the edge crates:
//! it depends on `verge-core` only, and every module above it (edgehub, metamanager, edged,
//! devicetwin, the apps bridge) keeps its durable state here, so a twin write and its
//! outbox report can commit in one transaction.
//!
//! Every write commits durably before the call returns, so a caller that acknowledges after
//! a write never acknowledges what a crash could lose. Calls block on disk I/O: call them
//! through [`MetaStore::blocking`] from async code.
//!
//! # Layout
//! - [`MetaStore`] (`db`): opening the file (mode 0600), transactions, the blocking pool.
//! - `objects`: table `objects`, every object the cloud sent ([`StoredObject`],
//!   [`ObjectIdentity`] for the reconnect inventory).
//! - `answers`: table `answers`, the cloud's last answer to each list query.
//! - [`outbox`]: the upstream outbox ([`OutboxKey`], [`OutboxEntry`]): reports coalesced by
//!   key until the cloud acknowledges them.
//! - `apps_inbox`: third-party groups' downstream messages until the MQTT broker has them
//!   ([`InboxPut`], [`Pending`]).
//! - `twins`: devicetwin's records (twins, mappers, what each mapper was given), kept as
//!   the bytes devicetwin encodes.
//! - [`clock`]: the current time as a Kubernetes timestamp.
//! - [`private_dir`]: edgecore's private directories (the data directory this file lives
//!   in, the pods' directories, the node's key), mode 0700.
//! - [`error`]: the crate's [`Error`].

mod answers;
mod apps_inbox;
pub mod clock;
mod db;
pub mod error;
mod objects;
pub mod outbox;
pub mod private_dir;
mod twins;

pub use apps_inbox::{InboxPut, KEEP_PUBLISHED, Pending};
pub use db::{MetaStore, Transaction};
pub use error::{Error, Result};
pub use objects::{ObjectIdentity, StoredObject};
pub use outbox::{OutboxEntry, OutboxKey, OutboxLimits};
pub use twins::TwinTable;
