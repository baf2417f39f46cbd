//! [`StreamError`]: why a kubelet API request of the streaming server failed, with the HTTP
//! status and text the kubelet answers (the API server passes 4xx bodies to kubectl).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// A refused or failed kubelet API request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// No such pod on this node (404).
    #[error("pod \"{0}\" does not exist")]
    PodNotFound(String),
    /// The pod's spec has no such container (404).
    #[error("container \"{container}\" not found in pod \"{pod}\"")]
    ContainerNotFound {
        /// The container asked for.
        container: String,
        /// The pod.
        pod: String,
    },
    /// No container named for a pod with several (400).
    #[error("a container name must be specified for pod {0}")]
    ContainerRequired(String),
    /// The container has not started (400).
    #[error("container \"{container}\" in pod \"{pod}\" is waiting to start")]
    NotRunning {
        /// The container.
        container: String,
        /// The pod.
        pod: String,
    },
    /// `previous=true` for a container that never terminated (400).
    #[error("previous terminated container \"{container}\" in pod \"{pod}\" not found")]
    PreviousNotFound {
        /// The container.
        container: String,
        /// The pod.
        pod: String,
    },
    /// A query parameter that does not parse (400).
    #[error("invalid query parameter {name}: {reason}")]
    BadQuery {
        /// The parameter.
        name: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The container runtime failed (500); the body carries its error and causes.
    #[error("container runtime")]
    Runtime(#[source] verge_container_runtime::RuntimeError),
    /// The local store failed (500).
    #[error("local store: {0}")]
    Store(String),
}

impl StreamError {
    /// The HTTP status the kubelet answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::PodNotFound(_) | Self::ContainerNotFound { .. } => StatusCode::NOT_FOUND,
            Self::ContainerRequired(_)
            | Self::NotRunning { .. }
            | Self::PreviousNotFound { .. }
            | Self::BadQuery { .. } => StatusCode::BAD_REQUEST,
            Self::Runtime(_) | Self::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for StreamError {
    /// The status and the error's text with its causes (`: `-joined).
    fn into_response(self) -> Response {
        (self.status(), chain(&self)).into_response()
    }
}

/// `error` with its sources, `: `-joined (Go's wrapped error text, which the kubelet's
/// messages carry).
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
