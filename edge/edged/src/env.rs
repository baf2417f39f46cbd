//! A container's environment, as the kubelet builds it (`makeEnvironmentVariables`).
//!
//! Order: every `envFrom` source (configMapRef / secretRef, keys with `prefix`; keys that
//! are not valid variable names are skipped), then every `env` entry; a later definition
//! of a name replaces the earlier value. An `env` `value` has `$(VAR)` references to
//! variables defined before it expanded (`$$` is a literal `$`; unknown references stay as
//! written). `valueFrom` takes a configMapKeyRef / secretKeyRef, a fieldRef (see
//! `fieldpath`) or a resourceFieldRef. Missing non-optional objects and keys fail with
//! the kubelet's `CreateContainerConfigError` messages.
//!
//! Service variables (`services`: `KUBERNETES_SERVICE_HOST`, `{NAME}_SERVICE_PORT`, ...)
//! are the base layer, as in the kubelet: `$(VAR)` in an `env` value falls back to them when
//! the container has not defined `VAR` (yet), and those the container does not define
//! itself follow its own variables (the kubelet appends them after the container's).

mod fieldpath;
pub mod services;

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};

pub(crate) use fieldpath::{container_resource, pod_field};

use super::objects::PodObjects;
use crate::{Error, Result};

/// The environment being built: names in first-definition order, later values win.
#[derive(Default)]
struct Env {
    order: Vec<String>,
    values: HashMap<String, String>,
}

impl Env {
    fn set(&mut self, name: String, value: String) {
        if !self.values.contains_key(&name) {
            self.order.push(name.clone());
        }
        self.values.insert(name, value);
    }

    /// Appends the variables of `base` this environment does not define (the kubelet's
    /// "remaining service env vars").
    fn append_missing(&mut self, base: Self) {
        let Self { order, mut values } = base;
        for name in order {
            if !self.values.contains_key(&name)
                && let Some(value) = values.remove(&name)
            {
                self.set(name, value);
            }
        }
    }

    fn into_list(self) -> Vec<String> {
        let Self { order, mut values } = self;
        order
            .into_iter()
            .map(|k| {
                let v = values.remove(&k).unwrap_or_default();
                format!("{k}={v}")
            })
            .collect()
    }
}

/// Objects fetched once per call, as the kubelet caches them per container.
struct Cache<'a, O> {
    objects: &'a O,
    ns: &'a str,
    config_maps: HashMap<String, Option<ConfigMap>>,
    secrets: HashMap<String, Option<Secret>>,
}

impl<O: PodObjects> Cache<'_, O> {
    async fn config_map(&mut self, name: &str) -> Result<Option<&ConfigMap>> {
        if !self.config_maps.contains_key(name) {
            let cm = self.objects.config_map(self.ns, name).await?;
            self.config_maps.insert(name.to_owned(), cm);
        }
        Ok(self.config_maps.get(name).and_then(Option::as_ref))
    }

    async fn secret(&mut self, name: &str) -> Result<Option<&Secret>> {
        if !self.secrets.contains_key(name) {
            let s = self.objects.secret(self.ns, name).await?;
            self.secrets.insert(name.to_owned(), s);
        }
        Ok(self.secrets.get(name).and_then(Option::as_ref))
    }
}

fn config(msg: String) -> Error {
    Error::ContainerConfig(msg)
}

/// The service variables of a container of `pod` (in namespace `ns`), from the services
/// `objects` knows: those of `default` (for the master service) and, with service links
/// enabled, those of `ns`.
async fn service_env<O: PodObjects>(pod: &Pod, ns: &str, objects: &O) -> Result<Env> {
    let links = services::service_links_enabled(pod);
    let default_services = objects.services(services::MASTER_NAMESPACE).await?;
    let namespace_services = if links && ns != services::MASTER_NAMESPACE {
        objects.services(ns).await?
    } else {
        Vec::new()
    };
    let of_ns = if ns == services::MASTER_NAMESPACE {
        &default_services
    } else {
        &namespace_services
    };
    let picked = services::visible(ns, links, &default_services, of_ns);
    let mut env = Env::default();
    for (name, value) in services::from_services(picked.into_values()) {
        env.set(name, value);
    }
    Ok(env)
}

/// `KEY=VALUE` entries for `container` of `pod`, in Kubernetes order (envFrom first, then
/// env; later wins; then the service variables not defined by either), with `$(VAR)`
/// expansion over the container's variables and then the service variables. `pod_ip`
/// answers `status.podIP` (empty when `None`), `host_ip` (the node's IP) `status.hostIP` and
/// `status.hostIPs`; `node_name` answers `spec.nodeName` when the pod does not name its node.
///
/// # Errors
/// [`Error::ContainerConfig`] with the kubelet's message: `configmap "x" not found`,
/// `secret "x" not found`, `couldn't find key k in ConfigMap ns/x`, `couldn't find key k in
/// Secret ns/x`, `unsupported fieldPath: ...`, `unsupported container resource : ...`;
/// errors of `objects` (e.g. a cloud query timeout) as they are.
pub async fn resolve_env<O: PodObjects>(
    pod: &Pod,
    container: &Container,
    objects: &O,
    pod_ip: Option<&str>,
    host_ip: Option<&str>,
    node_name: &str,
) -> Result<Vec<String>> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut cache = Cache {
        objects,
        ns,
        config_maps: HashMap::new(),
        secrets: HashMap::new(),
    };
    let service_env = service_env(pod, ns, objects).await?;
    let mut env = Env::default();
    for source in container.env_from.iter().flatten() {
        let prefix = source.prefix.as_deref().unwrap_or_default();
        let data: BTreeMap<String, String> = if let Some(r) = &source.config_map_ref {
            let optional = r.optional.unwrap_or(false);
            match cache.config_map(&r.name).await? {
                Some(cm) => cm.data.clone().unwrap_or_default(),
                None if optional => continue,
                None => return Err(config(format!("configmap \"{}\" not found", r.name))),
            }
        } else if let Some(r) = &source.secret_ref {
            let optional = r.optional.unwrap_or(false);
            match cache.secret(&r.name).await? {
                Some(s) => secret_strings(s),
                None if optional => continue,
                None => return Err(config(format!("secret \"{}\" not found", r.name))),
            }
        } else {
            continue;
        };
        for (k, v) in data {
            let name = format!("{prefix}{k}");
            // The 1.37 kubelet takes every key (the API server already checked the prefix
            // and the keys); only what no environment can carry is left out.
            if is_env_var_name(&name) {
                env.set(name, v);
            }
        }
    }
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(v), _) if !v.is_empty() => expand(v, &[&env.values, &service_env.values]),
            (_, Some(from)) => {
                if let Some(f) = &from.field_ref {
                    fieldpath::env_field(pod, &f.field_path, pod_ip, host_ip, node_name)
                        .map_err(config)?
                } else if let Some(r) = &from.resource_field_ref {
                    let name = r.container_name.as_deref().filter(|c| !c.is_empty());
                    container_resource(pod, name.unwrap_or(&container.name), r).map_err(config)?
                } else if let Some(r) = &from.config_map_key_ref {
                    let optional = r.optional.unwrap_or(false);
                    let Some(cm) = cache.config_map(&r.name).await? else {
                        if optional {
                            continue;
                        }
                        return Err(config(format!("configmap \"{}\" not found", r.name)));
                    };
                    match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => v.clone(),
                        None if optional => continue,
                        None => {
                            let msg =
                                format!("couldn't find key {} in ConfigMap {ns}/{}", r.key, r.name);
                            return Err(config(msg));
                        }
                    }
                } else if let Some(r) = &from.secret_key_ref {
                    let optional = r.optional.unwrap_or(false);
                    let Some(secret) = cache.secret(&r.name).await? else {
                        if optional {
                            continue;
                        }
                        return Err(config(format!("secret \"{}\" not found", r.name)));
                    };
                    match secret.data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => String::from_utf8_lossy(&v.0).into_owned(),
                        None if optional => continue,
                        None => {
                            let msg =
                                format!("couldn't find key {} in Secret {ns}/{}", r.key, r.name);
                            return Err(config(msg));
                        }
                    }
                } else {
                    String::new()
                }
            }
            _ => String::new(),
        };
        env.set(var.name.clone(), value);
    }
    env.append_missing(service_env);
    Ok(env.into_list())
}

/// A secret's `data` as strings (`stringData` is write-only and ignored on read).
fn secret_strings(secret: &Secret) -> BTreeMap<String, String> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect()
}

/// Kubernetes `IsRelaxedEnvVarName` (the rule since `RelaxedEnvironmentVariableValidation`
/// went GA in 1.34): not empty, printable ASCII only, no `=`. Names such as `1-data-1`,
/// `$_x` or `#@!` are valid; a name with `=`, a control character or non-ASCII text is
/// not (a process environment entry is `NAME=value`).
fn is_env_var_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_graphic() || c == ' ')
        && !name.contains('=')
}

/// Kubernetes `expansion.Expand` with `MappingFuncFor(maps...)`: `$(NAME)` -> the value of
/// `NAME` in the first of `maps` defining it (else left as `$(NAME)`), `$$` -> `$`, any
/// other `$` kept.
pub(crate) fn expand(input: &str, maps: &[&HashMap<String, String>]) -> String {
    expand_with(input, |name| match maps.iter().find_map(|m| m.get(name)) {
        Some(v) => v.clone(),
        None => format!("$({name})"),
    })
}

/// Kubernetes `expansion.Expand`: every `$(NAME)` is replaced by `mapping(NAME)`, `$$`
/// becomes `$`, any other `$` (also an unclosed `$(`) is kept.
pub(crate) fn expand_with(input: &str, mut mapping: impl FnMut(&str) -> String) -> String {
    let bytes = input.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'$' || i + 1 == bytes.len() {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        match bytes[i + 1] {
            b'$' => {
                out.push(b'$');
                i += 2;
            }
            b'(' => match bytes[i + 2..].iter().position(|&b| b == b')') {
                Some(len) => {
                    out.extend_from_slice(mapping(&input[i + 2..i + 2 + len]).as_bytes());
                    i += len + 3;
                }
                None => {
                    out.extend_from_slice(b"$(");
                    i += 2;
                }
            },
            _ => {
                out.push(b'$');
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests;
