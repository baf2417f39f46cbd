//! The error type of `verge-edgecore`.

use std::path::PathBuf;

/// Everything that can go wrong in edgecore. Each variant keeps its cause as `source`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// edgehub failed (connecting, the stream, its queues).
    #[error(transparent)]
    EdgeHub(#[from] crate::edgehub::error::Error),
    /// The apps bridge could not be set up or refused a message.
    #[error(transparent)]
    Apps(#[from] crate::apps::Error),
    /// The eventbus could not be set up (its address or password file).
    #[error(transparent)]
    EventBus(#[from] crate::eventbus::Error),
    /// The edge store failed or refused a write (the redb file, a full outbox).
    #[error(transparent)]
    Store(#[from] verge_edge_store::Error),
    /// metamanager refused a message or a cloud query failed.
    #[error(transparent)]
    MetaManager(#[from] crate::metamanager::Error),
    /// devicetwin failed or refused a request (an unknown device or property, a mapper
    /// call, the DMI socket).
    #[error(transparent)]
    DeviceTwin(#[from] crate::devicetwin::Error),
    /// edged or the node agent failed (a runtime, volume or report failure that stops it).
    #[error(transparent)]
    Edged(#[from] verge_edged::Error),
    /// taskmanager failed (its store could not be read).
    #[error("taskmanager")]
    Tasks(#[from] crate::tasks::Error),
    /// The configuration file could not be read.
    #[error("cannot read configuration file {path}")]
    ConfigRead {
        /// The file's path.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: std::io::Error,
    },
    /// The configuration file is not valid YAML for [`crate::Config`] (names the field).
    #[error(transparent)]
    ConfigParse(#[from] verge_core::ConfigError),
    /// A configuration value parsed but is not usable.
    #[error("invalid configuration field `{field}`: {reason}")]
    ConfigValue {
        /// The offending field, e.g. `system_reserved.cpu`.
        field: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// The data directory could not be created or used.
    #[error("cannot use data directory {path}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: std::io::Error,
    },
    /// A module of edgecore panicked (the panic was printed); the others were stopped.
    #[error("module {module} panicked")]
    ModulePanicked {
        /// The module's name (`edgehub`, `metamanager`, `edged`, `node`).
        module: &'static str,
    },
}

/// `Result` with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
