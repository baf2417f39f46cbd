//! The errors of the apps bridge.

/// What can go wrong in the apps bridge. Each variant keeps its cause as `source`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A downstream message of a third-party group names no resource, so no edge app's
    /// topic can carry it (an answer from the controller must name the answered resource).
    #[error(
        "{message} names no resource; edge apps receive messages on the topic of their resource"
    )]
    NotForApps {
        /// The message, as `<operation> <path> (<id>)`.
        message: String,
    },
    /// The broker's address or the password file cannot be used (`eventBus:`).
    #[error(transparent)]
    EventBus(#[from] verge_eventbus::Error),
    /// The edge store failed (the inbox).
    #[error(transparent)]
    Store(#[from] verge_edge_store::Error),
    /// edgehub refused a report (a full outbox) or has stopped.
    #[error(transparent)]
    EdgeHub(#[from] verge_edgehub::Error),
}

impl Error {
    /// Whether this is the outbox refusing a droppable report because it is full.
    pub fn is_outbox_full(&self) -> bool {
        match self {
            Self::Store(error) => error.is_outbox_full(),
            Self::EdgeHub(error) => error.is_outbox_full(),
            _ => false,
        }
    }
}

/// The apps bridge's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
