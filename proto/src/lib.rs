//! Verge's wire API: bindings generated from `proto/verge/**.proto` by tonic/prost, and the
//! one conversion between the wire [`message::Message`] and the typed
//! [`verge_core::Envelope`] every component works on.
//!
//! # Layout
//! - [`verge`]: the generated code; [`message`] and [`hub`] alias its packages.
//! - [`message`]: package `verge.message.v1` (the `Message` envelope, `Inventory`).
//! - [`hub`]: package `verge.hub.v1` (the `EdgeHub` and `ControllerHub` services).
//! - [`dmi`]: package `v1beta1`, KubeEdge's device-management interface (DMI).
//! - [`envelope`]: `TryFrom<Message> for Envelope`, `From<Envelope> for Message`, and the
//!   stored form ([`envelope::encode`] / [`envelope::decode`]).
//! - [`error`]: the crate's [`Error`] (a wire message that is not a valid envelope).
//! - [`tunnel`]: one tunnelled connection as `EdgeHub.Tunnel` frames ([`tunnel::splice`]).
//! - `build` (feature `testing` only): wire-level constructors and the `MessageExt`
//!   accessors, for tests and tools that play a raw peer. Production code never reads
//!   `Message` fields: it converts at the stream boundary.

/// Generated code, nested as the protobuf packages are (`verge.message.v1`, `verge.hub.v1`).
/// The `.proto` comments are plain text, not Markdown: rustdoc's HTML and link checks do not
/// apply to them.
#[allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    rustdoc::invalid_html_tags,
    rustdoc::broken_intra_doc_links,
    rustdoc::bare_urls
)]
pub mod verge {
    /// Package `verge.message.v1`.
    pub mod message {
        /// Version 1.
        pub mod v1 {
            tonic::include_proto!("verge.message.v1");
        }
    }
    /// Package `verge.hub.v1`.
    pub mod hub {
        /// Version 1.
        pub mod v1 {
            tonic::include_proto!("verge.hub.v1");
        }
    }
}

/// KubeEdge's device-management interface (DMI), protobuf package `v1beta1`
/// (`proto/dmi/v1beta1/api.proto`): `DeviceManagerService`, which edgecore serves to
/// mappers, and `DeviceMapperService`, which every mapper serves to edgecore. Same
/// services, messages, field names and numbers as KubeEdge v1.23, so KubeEdge mappers talk
/// to edgecore unchanged. `google.protobuf.Any` is [`prost_types::Any`].
#[allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    rustdoc::invalid_html_tags,
    rustdoc::broken_intra_doc_links,
    rustdoc::bare_urls
)]
pub mod dmi {
    /// Package `v1beta1`.
    pub mod v1beta1 {
        tonic::include_proto!("v1beta1");
    }
}

pub use verge::hub::v1 as hub;
pub use verge::message::v1 as message;

#[cfg(feature = "testing")]
pub mod build;
pub mod codec;
pub mod envelope;
pub mod error;
pub mod transport;
pub mod tunnel;

#[cfg(feature = "testing")]
pub use build::MessageExt;
pub use error::{Error, Result};
pub use message::{Header, Inventory, InventoryEntry, Message, Route, TraceContext};
