//! What a request asks for, as the API server's `RequestInfoFactory` reads it: a resource
//! request (verb, API group and version, resource, subresource, namespace, name) or a
//! non-resource path (`/version`, `/api`, `/apis`, `/openapi/v2`, ...). Authorization
//! decisions and the store's answers are keyed by it.

use http::Method;

/// A request for an API resource.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceRequest {
    /// The Kubernetes verb: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`.
    pub verb: &'static str,
    /// The API group (`""` for the core group).
    pub group: String,
    /// The API version, e.g. `v1`.
    pub version: String,
    /// The resource (plural, lower case), e.g. `pods`.
    pub resource: String,
    /// The subresource, e.g. `status`, if any.
    pub subresource: Option<String>,
    /// The namespace, for namespaced requests.
    pub namespace: Option<String>,
    /// The object's name, for requests of one object.
    pub name: Option<String>,
}

/// What a request path asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RequestInfo {
    /// A resource request.
    Resource(ResourceRequest),
    /// Any other path (discovery, `/version`, OpenAPI, health), with the HTTP verb in
    /// lower case as the API server authorizes it (`get`, `post`, ...).
    NonResource {
        /// The verb.
        verb: &'static str,
        /// The path.
        path: String,
    },
}

/// Whether the query string `query` asks for a watch (`watch=true` or `watch=1`).
pub fn is_watch(query: Option<&str>) -> bool {
    query.is_some_and(|q| form_pairs(q).any(|(k, v)| k == "watch" && matches!(v, "true" | "1")))
}

/// The `key=value` pairs of a query string (not percent-decoded).
pub fn form_pairs(query: &str) -> impl Iterator<Item = (&str, &str)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
}

/// Reads `method`, `path` and `query` as the API server does (see the module docs).
pub fn parse(method: &Method, path: &str, query: Option<&str>) -> RequestInfo {
    let non_resource = || RequestInfo::NonResource {
        verb: http_verb(method),
        path: path.to_owned(),
    };
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, mut rest) = match parts.as_slice() {
        ["api", version, rest @ ..] if !rest.is_empty() => ("", *version, rest),
        ["apis", group, version, rest @ ..] if !rest.is_empty() => (*group, *version, rest),
        _ => return non_resource(),
    };
    let mut verb = resource_verb(method);
    // The deprecated `/watch/` prefix of list and get paths.
    if let ["watch", tail @ ..] = rest {
        if tail.is_empty() {
            return non_resource();
        }
        verb = "watch";
        rest = tail;
    }
    let mut namespace = None;
    // `namespaces/<ns>/<resource>...`; `namespaces/<ns>` alone is the Namespace itself.
    if let ["namespaces", ns, tail @ ..] = rest
        && !tail.is_empty()
    {
        namespace = Some((*ns).to_owned());
        rest = tail;
    }
    let (resource, name, subresource) = match rest {
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some(*name), None),
        [resource, name, sub, ..] => (*resource, Some(*name), Some(*sub)),
        [] => return non_resource(),
    };
    if resource.is_empty() || name.is_some_and(str::is_empty) {
        return non_resource();
    }
    if name.is_none() {
        verb = match verb {
            "get" => "list",
            "delete" => "deletecollection",
            other => other,
        };
    }
    if verb == "list" && is_watch(query) {
        verb = "watch";
    }
    // A list or watch with the field selector `metadata.name=<name>` is of that one object,
    // as the API server authorizes it.
    let name = name.map(str::to_owned).or_else(|| {
        matches!(verb, "list" | "watch")
            .then(|| query.and_then(selected_name))
            .flatten()
    });
    RequestInfo::Resource(ResourceRequest {
        verb,
        group: group.to_owned(),
        version: version.to_owned(),
        resource: resource.to_owned(),
        subresource: subresource.map(str::to_owned),
        namespace,
        name,
    })
}

/// The name a `fieldSelector` of `query` requires exactly (`metadata.name=<name>` or
/// `metadata.name==<name>`, alone).
fn selected_name(query: &str) -> Option<String> {
    let selector = form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "fieldSelector")?
        .1;
    let name = selector
        .strip_prefix("metadata.name==")
        .or_else(|| selector.strip_prefix("metadata.name="))?;
    (!name.is_empty() && !name.contains([',', '=', '!'])).then(|| name.to_owned())
}

fn resource_verb(method: &Method) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "get",
    }
}

fn http_verb(method: &Method) -> &'static str {
    match *method {
        Method::POST => "post",
        Method::PUT => "put",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        Method::HEAD => "head",
        Method::OPTIONS => "options",
        _ => "get",
    }
}

impl RequestInfo {
    /// Whether the request only reads (`get`, `list`, `watch`, or a non-resource `get`/`head`).
    pub fn is_read(&self) -> bool {
        match self {
            Self::Resource(r) => matches!(r.verb, "get" | "list" | "watch"),
            Self::NonResource { verb, .. } => matches!(*verb, "get" | "head"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(method: Method, path: &str, query: Option<&str>) -> ResourceRequest {
        match parse(&method, path, query) {
            RequestInfo::Resource(r) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn paths_read_as_the_api_server_reads_them() {
        let r = resource(Method::GET, "/api/v1/namespaces/shop/pods", None);
        assert_eq!(
            (r.verb, r.group.as_str(), r.resource.as_str()),
            ("list", "", "pods")
        );
        assert_eq!(r.namespace.as_deref(), Some("shop"));
        let r = resource(
            Method::GET,
            "/api/v1/namespaces/shop/pods",
            Some("watch=1&x=y"),
        );
        assert_eq!(r.verb, "watch");
        let r = resource(Method::GET, "/api/v1/namespaces/shop/pods/web/log", None);
        assert_eq!((r.verb, r.name.as_deref()), ("get", Some("web")));
        assert_eq!(r.subresource.as_deref(), Some("log"));
        let r = resource(
            Method::GET,
            "/api/v1/watch/namespaces/shop/configmaps/c",
            None,
        );
        assert_eq!((r.verb, r.resource.as_str()), ("watch", "configmaps"));
        let r = resource(Method::GET, "/apis/apps/v1/deployments", None);
        assert_eq!(
            (r.verb, r.group.as_str(), r.version.as_str()),
            ("list", "apps", "v1")
        );
        assert_eq!(r.namespace, None);
        let r = resource(
            Method::GET,
            "/api/v1/namespaces/shop/configmaps",
            Some("fieldSelector=metadata.name%3Dcfg&watch=true"),
        );
        assert_eq!((r.verb, r.name.as_deref()), ("watch", Some("cfg")));
        let r = resource(Method::GET, "/api/v1/namespaces/shop", None);
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref()),
            ("namespaces", Some("shop"))
        );
        let r = resource(Method::DELETE, "/api/v1/namespaces/shop/pods", None);
        assert_eq!(r.verb, "deletecollection");
        let r = resource(
            Method::PATCH,
            "/api/v1/namespaces/shop/pods/web/status",
            None,
        );
        assert_eq!(
            (r.verb, r.subresource.as_deref()),
            ("patch", Some("status"))
        );
        assert!(!RequestInfo::Resource(r).is_read());
        for path in [
            "/version",
            "/api",
            "/apis",
            "/api/v1",
            "/apis/apps/v1",
            "/openapi/v2",
        ] {
            assert!(
                matches!(
                    parse(&Method::GET, path, None),
                    RequestInfo::NonResource { verb: "get", .. }
                ),
                "{path}"
            );
        }
    }
}
