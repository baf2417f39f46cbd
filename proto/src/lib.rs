//! Verge's wire API: bindings generated from `proto/verge/**.proto` by tonic/prost, plus
//! helpers that build and inspect [`message::Message`]s with the typed model of `verge-core`.
//!
//! # Layout
//! - [`verge`]: the generated code; [`message`] and [`hub`] alias its packages.
//! - [`message`]: package `verge.message.v1` (the `Message` envelope, `Inventory`).
//! - [`hub`]: package `verge.hub.v1` (the `EdgeHub` and `ControllerHub` services).
//! - [`build`]: constructors and accessors over the generated types.

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

pub use verge::hub::v1 as hub;
pub use verge::message::v1 as message;

pub mod build;

pub use build::MessageExt;
pub use message::{Header, Inventory, InventoryEntry, Message, Route, TraceContext};
