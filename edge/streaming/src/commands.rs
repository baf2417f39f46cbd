//! The kubelet paths that upgrade the connection — `/exec`, `/attach` (GET and POST, with
//! or without the pod uid) and `/portForward` — resolved to this node's containers on the
//! runtime and handed to [`super::handlers`].
//!
//! As the kubelet does, a request names the pod by namespace and name (and optionally its
//! uid, which must match the stored pod's); exec and attach reach the current instance of
//! the container, which must be running; port-forward reaches the pod sandbox's network
//! namespace. Failures answer before the upgrade, with [`StreamError`]'s status and text.

use std::collections::HashMap;

use axum::extract::{Path, Request, State};
use axum::response::{IntoResponse as _, Response};

use super::containers::{Containers, container_name};
use super::error::StreamError;
use super::handlers;
use verge_container_runtime::StreamingRuntime;

/// The path parameters of the routes (`namespace`, `pod`, optional `uid`, `container`).
type Params = HashMap<String, String>;

/// `/exec/{namespace}/{pod}[/{uid}]/{container}`.
pub(crate) async fn exec<R: StreamingRuntime>(
    State(containers): State<Containers<R>>,
    Path(params): Path<Params>,
    request: Request,
) -> Response {
    match running_container(&containers, &params).await {
        Ok(id) => handlers::exec(request, containers.runtime().clone(), id).await,
        Err(error) => error.into_response(),
    }
}

/// `/attach/{namespace}/{pod}[/{uid}]/{container}`.
pub(crate) async fn attach<R: StreamingRuntime>(
    State(containers): State<Containers<R>>,
    Path(params): Path<Params>,
    request: Request,
) -> Response {
    match running_container(&containers, &params).await {
        Ok(id) => handlers::attach(request, containers.runtime().clone(), id).await,
        Err(error) => error.into_response(),
    }
}

/// `/portForward/{namespace}/{pod}[/{uid}]`.
pub(crate) async fn port_forward<R: StreamingRuntime>(
    State(containers): State<Containers<R>>,
    Path(params): Path<Params>,
    request: Request,
) -> Response {
    let sandbox = async {
        let (namespace, name) = (param(&params, "namespace"), param(&params, "pod"));
        let pod = pod(&containers, &params).await?;
        let uid = pod.metadata.uid.unwrap_or_default();
        containers.sandbox_pid(namespace, name, &uid).await
    };
    match sandbox.await {
        Ok(pid) => handlers::port_forward(request, pid).await,
        Err(error) => error.into_response(),
    }
}

fn param<'a>(params: &'a Params, name: &str) -> &'a str {
    params.get(name).map_or("", String::as_str)
}

/// The stored pod the path names; a `uid` in the path must be the pod's.
async fn pod<R: StreamingRuntime>(
    containers: &Containers<R>,
    params: &Params,
) -> Result<k8s_openapi::api::core::v1::Pod, StreamError> {
    let (namespace, name) = (param(params, "namespace"), param(params, "pod"));
    let pod = containers.pod(namespace, name).await?;
    match params.get("uid") {
        Some(uid) if pod.metadata.uid.as_deref() != Some(uid.as_str()) => {
            Err(StreamError::PodNotFound(name.to_owned()))
        }
        _ => Ok(pod),
    }
}

/// The runtime's id of the running current instance of the container the path names.
async fn running_container<R: StreamingRuntime>(
    containers: &Containers<R>,
    params: &Params,
) -> Result<String, StreamError> {
    let pod = pod(containers, params).await?;
    let container = container_name(&pod, param(params, "container"))?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let (namespace, name) = (param(params, "namespace"), param(params, "pod"));
    let instances = containers
        .instances(namespace, name, &uid, &container)
        .await?;
    instances
        .into_iter()
        .next()
        .filter(|current| current.running)
        .map(|current| current.id)
        .ok_or(StreamError::NotRunning {
            container,
            pod: name.to_owned(),
        })
}
