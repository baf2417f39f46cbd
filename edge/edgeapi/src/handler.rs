//! One request, online or offline.
//!
//! **Every request**: a bound service-account token must be bound to a pod this node runs
//! (its stored pod with that uid; a token of another node's pod is refused, 401), and an
//! expired token is refused (401), before anything else.
//!
//! **Online** the request goes to the API server ([`Upstream`]) and its answer back to the
//! pod; on the way the edge API learns from it ([`ApiCache`]): a token the API server did
//! not refuse (any answer but 401) is authentic, and the answer is its authorization
//! decision for that user and request (403: denied; any other answer but 401, 429 and 5xx:
//! allowed); the answer to a read other than a watch is kept.
//!
//! **Offline** (the API server cannot be reached) a write gets [`status::offline`]. A read is
//! answered from what was kept, only if its token is one the API server authenticated or one
//! whose signature verifies with the issuer's kept keys ([`crate::issuer`]), not expired, and the API server's last decision on the same user's same request (verb,
//! resource, namespace, name) allowed it no longer ago than the configured bound: a request
//! the API server denied, or never decided, is denied (403). The edge API never decides
//! more than the API server did.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tracing::{debug, warn};
use verge_core::{ResourceKey, ResourceType};
use verge_edge_store::MetaStore;

use crate::authn::{self, Claims};
use crate::cache::{self, ApiCache, CacheError, Decision, KeptResponse, KnownToken};
use crate::issuer::{self, IssuerKeys};
use crate::local;
use crate::request::{self, RequestInfo, ResourceRequest};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status;
use crate::upstream::{Body, Unreachable, Upstream};
use crate::watch::{self, WatchRequest};

/// Largest answer kept for offline reads, in bytes; a larger one is passed on, not kept.
pub const MAX_KEPT_RESPONSE: usize = 8 * 1024 * 1024;

/// Serves requests; see the module docs.
#[derive(Debug)]
pub struct Handler {
    upstream: Arc<Upstream>,
    cache: Option<Arc<ApiCache>>,
    store: MetaStore,
    decision_max_age: Duration,
    /// What is known of the token issuer (kept in the cache too).
    issuer: Arc<Mutex<IssuerKeys>>,
    /// When the issuer's keys may next be fetched, seconds since the Unix epoch.
    next_fetch: Arc<AtomicU64>,
}

/// What the handler knows of a request before it is sent on.
struct Asked {
    info: RequestInfo,
    token: Option<String>,
    claims: Option<Claims>,
    /// The key its answer is kept under (reads other than watches).
    keep: Option<String>,
    /// Its query string.
    query: Option<String>,
    /// Its `Accept` header.
    accept: Option<String>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn unauthorized(message: &str) -> Response<Body> {
    boxed(status::failure(
        StatusCode::UNAUTHORIZED,
        "Unauthorized",
        message,
    ))
}

fn forbidden(message: &str) -> Response<Body> {
    boxed(status::failure(StatusCode::FORBIDDEN, "Forbidden", message))
}

fn boxed(response: Response<Full<Bytes>>) -> Response<Body> {
    response.map(|body| body.map_err(|never| match never {}).boxed())
}

impl Handler {
    /// A handler sending on through `upstream`, keeping what it learns in `cache` (none:
    /// nothing is answered offline), checking bound tokens against the pods of `store`, and
    /// trusting decisions offline for `decision_max_age`.
    pub fn new(
        upstream: Arc<Upstream>,
        cache: Option<Arc<ApiCache>>,
        store: MetaStore,
        decision_max_age: Duration,
    ) -> Self {
        let issuer = cache
            .as_ref()
            .and_then(|c| {
                c.issuer()
                    .inspect_err(|error| warn!(%error, "edge API: the kept issuer keys"))
                    .ok()
            })
            .unwrap_or_default();
        Self {
            upstream,
            cache,
            store,
            decision_max_age,
            issuer: Arc::new(Mutex::new(issuer)),
            next_fetch: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Answers `request` (see the module docs).
    pub async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let uri = request.uri();
        let info = request::parse(request.method(), uri.path(), uri.query());
        let token = authn::bearer(request.headers()).map(str::to_owned);
        let claims = token.as_deref().and_then(Claims::of);
        if let Some(claims) = &claims {
            if claims.expired_at(now()) {
                return unauthorized("the service account token has expired");
            }
            if let Some(uid) = claims.pod_uid()
                && !self.runs_pod(claims, uid).await
            {
                return unauthorized(
                    "the service account token is bound to a pod that does not run on this node",
                );
            }
        }
        let accept = request
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let keep = (info.is_read()
            && !request::is_watch(uri.query())
            && !matches!(&info, RequestInfo::Resource(r) if r.verb == "watch"))
        .then(|| cache::response_key(uri.path(), uri.query(), accept.as_deref()));
        let asked = Asked {
            info,
            token,
            claims,
            keep,
            query: uri.query().map(str::to_owned),
            accept,
        };
        let path = uri.path().to_owned();
        match self.upstream.send(request.map(BodyExt::boxed)).await {
            Ok(response) => self.learn(&asked, response).await,
            Err(why) => {
                debug!(%why, %path, "edge API: API server unreachable; answering offline");
                self.offline(&asked, &why).await
            }
        }
    }

    /// Whether the pod named in `claims` with `uid` is stored on this node.
    async fn runs_pod(&self, claims: &Claims, uid: &str) -> bool {
        let (Some(ns), Some(pod)) = (
            claims.kubernetes.as_ref().map(|k| k.namespace.clone()),
            claims
                .kubernetes
                .as_ref()
                .and_then(|k| k.pod.as_ref())
                .map(|p| p.name.clone()),
        ) else {
            return false;
        };
        let key = ResourceKey::new(ns, ResourceType::Pod, pod);
        let stored = self.store.blocking(move |s| s.get(&key)).await;
        matches!(stored, Ok(Some(object)) if object.uid == uid)
    }

    /// Runs `f` on the cache on the blocking pool; `None` without a cache or on a failure
    /// (logged).
    async fn with_cache<T: Send + 'static>(
        &self,
        f: impl FnOnce(&ApiCache) -> Result<T, CacheError> + Send + 'static,
    ) -> Option<T> {
        let cache = Arc::clone(self.cache.as_ref()?);
        match tokio::task::spawn_blocking(move || f(&cache)).await {
            Ok(Ok(value)) => Some(value),
            Ok(Err(error)) => {
                warn!(%error, "edge API cache");
                None
            }
            Err(error) => {
                warn!(%error, "edge API cache task");
                None
            }
        }
    }

    /// The API server answered: learn from it and pass it on.
    async fn learn(&self, asked: &Asked, response: Response<Incoming>) -> Response<Body> {
        let code = response.status();
        if let Some(token) = &asked.token {
            let fingerprint = authn::fingerprint(token);
            if code == StatusCode::UNAUTHORIZED {
                self.with_cache(move |c| c.forget_token(&fingerprint)).await;
            } else if let Some(claims) = &asked.claims {
                let known = KnownToken {
                    user: claims.sub.clone(),
                    exp: claims.exp,
                    pod_uid: claims.pod_uid().map(str::to_owned),
                };
                let allowed = match code.as_u16() {
                    403 => Some(false),
                    401 | 429 | 500.. => None,
                    _ => Some(true),
                };
                let info = asked.info.clone();
                let issuer = {
                    let mut kept = self.issuer.lock().unwrap_or_else(PoisonError::into_inner);
                    kept.learn(claims).then(|| kept.clone())
                };
                self.fetch_issuer_keys(token);
                self.with_cache(move |c| {
                    if let Some(issuer) = issuer {
                        c.keep_issuer(&issuer)?;
                    }
                    c.remember_token(&fingerprint, &known)?;
                    if let Some(allowed) = allowed {
                        let decision = Decision { allowed, at: now() };
                        c.record_decision(&known.user, &info, decision)?;
                    }
                    Ok(())
                })
                .await;
            }
        }
        let (mut parts, body) = response.into_parts();
        crate::upstream::strip_hop_by_hop(&mut parts.headers);
        let Some(key) = asked
            .keep
            .clone()
            .filter(|_| code == StatusCode::OK && self.cache.is_some())
        else {
            return Response::from_parts(parts, body.boxed());
        };
        let body = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) => {
                debug!(%error, "edge API: the API server's answer broke off");
                return boxed(status::offline("the API server's answer broke off"));
            }
        };
        if body.len() <= MAX_KEPT_RESPONSE {
            let kept = KeptResponse {
                status: code.as_u16(),
                content_type: parts
                    .headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                at: now(),
                body: body.to_vec(),
            };
            self.with_cache(move |c| c.keep(&key, &kept)).await;
        }
        parts.headers.remove(header::CONTENT_LENGTH);
        Response::from_parts(
            parts,
            Full::new(body).map_err(|never| match never {}).boxed(),
        )
    }

    /// Fetches the issuer's keys ([`issuer::JWKS_PATH`]) in the background with `token` (one
    /// the API server just authenticated), when they are missing or stale and no fetch was
    /// tried in the last [`issuer::RETRY_SECS`].
    fn fetch_issuer_keys(&self, token: &str) {
        let now = now();
        let stale = self
            .issuer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stale(now);
        let due = self.next_fetch.load(Ordering::Relaxed);
        if !stale
            || now < due
            || self
                .next_fetch
                .compare_exchange(
                    due,
                    now + issuer::RETRY_SECS,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        let (upstream, kept, cache) = (
            Arc::clone(&self.upstream),
            Arc::clone(&self.issuer),
            self.cache.clone(),
        );
        let token = token.to_owned();
        verge_runtime::tasks::spawn("edge api issuer keys", async move {
            match fetch_jwks(&upstream, &token).await {
                Ok(jwks) => {
                    let issuer = {
                        let mut issuer = kept.lock().unwrap_or_else(PoisonError::into_inner);
                        issuer.jwks = Some(jwks);
                        issuer.fetched_at = now;
                        issuer.clone()
                    };
                    debug!("edge API: fetched the service-account issuer's keys");
                    if let Some(cache) = cache {
                        let kept = tokio::task::spawn_blocking(move || cache.keep_issuer(&issuer));
                        if let Ok(Err(error)) = kept.await {
                            warn!(%error, "edge API: keeping the issuer's keys");
                        }
                    }
                }
                Err(why) => warn!(%why, "edge API: fetching the service-account issuer's keys"),
            }
        });
    }

    /// The API server cannot be reached (`why`): answer from what was kept, if allowed.
    async fn offline(&self, asked: &Asked, why: &Unreachable) -> Response<Body> {
        if !asked.info.is_read() {
            return boxed(status::offline(&why.0));
        }
        let Some(token) = &asked.token else {
            return unauthorized("offline, the edge API serves authenticated requests only");
        };
        let fingerprint = authn::fingerprint(token);
        let known = self
            .with_cache(move |c| c.token(&fingerprint))
            .await
            .flatten();
        let user = match known {
            Some(known) => known.user,
            None => {
                let verified = self
                    .issuer
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .verify(token, now());
                match verified {
                    Ok(claims) => claims.sub,
                    Err(why) => {
                        return unauthorized(&format!(
                            "offline, the edge API accepts only tokens the API server authenticated \
                             or the issuer's kept keys verify: {why}"
                        ));
                    }
                }
            }
        };
        let (who, info) = (user.clone(), asked.info.clone());
        let decision = self
            .with_cache(move |c| c.decision(&who, &info))
            .await
            .flatten();
        let age = |d: &Decision| Duration::from_secs(now().saturating_sub(d.at));
        match decision {
            None => {
                return forbidden(&format!(
                    "user \"{}\": offline, and the API server's decision on this request is not known",
                    user
                ));
            }
            Some(d) if !d.allowed => {
                return forbidden(&format!(
                    "user \"{}\" is forbidden this request (the API server's decision, kept offline)",
                    user
                ));
            }
            Some(d) if age(&d) > self.decision_max_age => {
                return forbidden(&format!(
                    "user \"{}\": offline, and the API server's decision on this request is older than {:?}",
                    user, self.decision_max_age
                ));
            }
            Some(_) => {}
        }
        if let RequestInfo::Resource(r) = &asked.info
            && let Some(answer) = self.answer_locally(asked, r, false).await
        {
            return answer;
        }
        let Some(key) = asked.keep.clone() else {
            return boxed(status::offline(&why.0));
        };
        match self.with_cache(move |c| c.kept(&key)).await.flatten() {
            Some(kept) => {
                let mut response = Response::new(Full::new(Bytes::from(kept.body)));
                *response.status_mut() =
                    StatusCode::from_u16(kept.status).unwrap_or(StatusCode::OK);
                if let Some(value) = kept
                    .content_type
                    .and_then(|t| HeaderValue::try_from(t).ok())
                {
                    response.headers_mut().insert(header::CONTENT_TYPE, value);
                }
                boxed(response)
            }
            None if let RequestInfo::Resource(r) = &asked.info
                && let Some(answer) = self.answer_locally(asked, r, true).await =>
            {
                answer
            }
            None => boxed(status::offline(&format!(
                "{}; no copy of this answer is kept",
                why.0
            ))),
        }
    }

    /// The node's own answer to an allowed offline read `r` ([`local`], [`watch`]). Without
    /// `lists`: a watch (of anything), or a get of an object the node holds (fresher than a
    /// kept answer: it carries the node's own changes). With `lists`: a list of what the node
    /// holds (asked when no answer of the API server was kept: the node may hold only some of
    /// the objects, e.g. the ConfigMaps its pods use). Gets and lists only when the client
    /// accepts plain JSON; `None` for the rest.
    async fn answer_locally(
        &self,
        asked: &Asked,
        r: &ResourceRequest,
        lists: bool,
    ) -> Option<Response<Body>> {
        let held =
            local::held(&r.group, &r.version, &r.resource).filter(|_| r.subresource.is_none());
        let query: Vec<(String, String)> = asked
            .query
            .as_deref()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        let param = |name: &str| {
            query
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let labels = match LabelSelector::parse(param("labelSelector").unwrap_or_default()) {
            Ok(labels) => labels,
            Err(message) => return Some(bad_request(&message)),
        };
        let fields = match FieldSelector::parse(param("fieldSelector").unwrap_or_default()) {
            Ok(fields) => fields,
            Err(message) => return Some(bad_request(&message)),
        };
        if r.verb == "watch" && !lists {
            let request = WatchRequest {
                held,
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                labels,
                fields,
                resource_version: param("resourceVersion").unwrap_or_default().to_owned(),
                bookmarks: param("allowWatchBookmarks") == Some("true"),
                timeout: param("timeoutSeconds")
                    .and_then(|t| t.parse().ok())
                    .map(Duration::from_secs),
            };
            return Some(watch::serve(
                self.store.clone(),
                request,
                self.upstream.sessions(),
            ));
        }
        let held = held.filter(|_| accepts_plain_json(asked.accept.as_deref()))?;
        let store = self.store.clone();
        let body = match (r.verb, &r.name) {
            ("get", Some(name)) if !lists => {
                let (ns, name) = (r.namespace.clone().unwrap_or_default(), name.clone());
                store
                    .blocking(move |s| {
                        Ok::<_, verge_edge_store::Error>(local::get(s, held, &ns, &name))
                    })
                    .await
                    .ok()??
            }
            ("list", _) if lists => {
                let ns = r.namespace.clone();
                let (items, newest) = store
                    .blocking(move |s| {
                        Ok::<_, verge_edge_store::Error>(local::list(
                            s,
                            held,
                            ns.as_deref(),
                            &labels,
                            &fields,
                            true,
                        ))
                    })
                    .await
                    .ok()?;
                local::list_object(held, items, newest)
            }
            _ => return None,
        };
        let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Some(boxed(response))
    }
}

/// `GET` [`issuer::JWKS_PATH`] from the API server with `token`.
async fn fetch_jwks(upstream: &Upstream, token: &str) -> Result<issuer::JwkSet, String> {
    let request = Request::get(issuer::JWKS_PATH)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        // The API server answers 406 to `application/json` here.
        .header(header::ACCEPT, "application/jwk-set+json, */*;q=0.8")
        .body(
            Full::new(Bytes::new())
                .map_err(|never| match never {})
                .boxed(),
        )
        .map_err(|e| e.to_string())?;
    let response = upstream.send(request).await.map_err(|e| e.0)?;
    if response.status() != StatusCode::OK {
        return Err(format!("the API server answered {}", response.status()));
    }
    let body = http_body_util::Limited::new(response.into_body(), issuer::MAX_JWKS_BYTES)
        .collect()
        .await
        .map_err(|e| format!("the key set: {e}"))?
        .to_bytes();
    serde_json::from_slice(&body).map_err(|e| format!("the key set: {e}"))
}

/// Whether an `Accept` header lets the answer be plain JSON (no header, `*/*`,
/// `application/*` or `application/json` without an `as=` parameter).
fn accepts_plain_json(accept: Option<&str>) -> bool {
    accept.is_none_or(|accept| {
        accept.split(',').any(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            matches!(media, "*/*" | "application/*" | "application/json")
                && !parts.any(|p| p.starts_with("as="))
        })
    })
}

fn bad_request(message: &str) -> Response<Body> {
    boxed(status::failure(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        message,
    ))
}
