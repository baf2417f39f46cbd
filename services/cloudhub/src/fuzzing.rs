//! Entry points for the fuzz targets in `fuzz/` (docs/fuzzing.md): the crate-private pure
//! rules of `routing` and the controller hello check, so that the fuzzer exercises
//! the code the services run instead of a copy. Not an API: hidden from the docs, and may
//! change with the fuzz targets.

use verge_core::{Envelope, Group};
use verge_proto::hub::ControllerHello;

use crate::Result;
use crate::routing::{self, Upstream};

/// The rule applied to a message read from `node`'s edge session: `Ok(None)` for a
/// keepalive (answered by cloudhub), `Ok(Some(group))` when it is forwarded to a controller
/// of `group`, its resource now cloud-side (`node/<node>/...`).
///
/// # Errors
/// As the session: [`crate::Error::MalformedRoute`] for a cloud-side path from an edge.
pub fn upstream(node: &str, envelope: &mut Envelope) -> Result<Option<Group>> {
    Ok(match routing::upstream(node, envelope)? {
        Upstream::Keepalive => None,
        Upstream::Forward(group) => Some(group),
    })
}

/// The rule applied to a downstream message a controller routed to `node`: the message to
/// queue on the node's session, its resource now edge-side.
///
/// # Errors
/// As the controller stream: [`crate::Error::UnexpectedFrame`],
/// [`crate::Error::MalformedRoute`], [`crate::Error::NodeMismatch`].
pub fn downstream(node: &str, envelope: Envelope) -> Result<Envelope> {
    routing::downstream(node, envelope)
}

/// The groups a controller hello asks to serve, checked as `ControllerHub.Attach` checks them.
///
/// # Errors
/// [`crate::Error::InvalidControllerHello`].
pub fn controller_hello(hello: &ControllerHello) -> Result<Vec<Group>> {
    crate::controller::parse_hello(hello)
}
