//! What the edge API keeps for offline answers, in its own redb file
//! (`<dataDir>/edge-api/cache.redb`, mode 0600; it survives restarts, so a node rebooted
//! offline still answers):
//!
//! - **tokens** the API server authenticated (by [`crate::authn::fingerprint`], never the
//!   token): the user and expiry read from their claims;
//! - **decisions**: whether the API server allowed a user a request (verb, group, resource,
//!   subresource, namespace, name; or a non-resource path), and when it said so;
//! - **issuer**: the service-account issuer's keys and the issuers and audiences the API
//!   server accepts ([`IssuerKeys`]);
//! - **responses**: the API server's answers to reads (get and list of any resource,
//!   custom resources included, and discovery), by request ([`response_key`]), bounded
//!   in bytes with least-recently-used eviction.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Mutex;

use redb::{Database, ReadableDatabase as _, ReadableTable as _, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::issuer::IssuerKeys;
use crate::request::{RequestInfo, form_pairs};

const TOKENS: TableDefinition<&str, &[u8]> = TableDefinition::new("tokens");
const DECISIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("decisions");
const RESPONSES: TableDefinition<&str, &[u8]> = TableDefinition::new("responses");
const ISSUER: TableDefinition<&str, &[u8]> = TableDefinition::new("issuer");
/// The one key of the issuer table.
const ISSUER_KEY: &str = "serviceaccount";

/// The page cache redb may hold in memory, in bytes.
const PAGE_CACHE_BYTES: usize = 1024 * 1024;

/// A token the API server authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownToken {
    /// The user (`sub`).
    pub user: String,
    /// Expiry, seconds since the Unix epoch, if the token has one.
    pub exp: Option<u64>,
    /// The pod it is bound to, if any.
    pub pod_uid: Option<String>,
}

/// An API server decision on a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// Allowed (an answer other than 401/403) or denied (403).
    pub allowed: bool,
    /// When it was made, seconds since the Unix epoch.
    pub at: u64,
}

/// A kept response: its status, content type and body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptResponse {
    /// The HTTP status.
    pub status: u16,
    /// `Content-Type`, if any.
    pub content_type: Option<String>,
    /// When it was kept, seconds since the Unix epoch.
    pub at: u64,
    /// The body.
    #[serde(with = "body")]
    pub body: Vec<u8>,
}

/// Bodies as base64 in the stored JSON.
mod body {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(body: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(body))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

/// The least-recently-used order of the kept responses.
#[derive(Debug, Default)]
struct Lru {
    tick: u64,
    entries: HashMap<String, (u64, usize)>,
    order: BTreeMap<u64, String>,
    bytes: usize,
}

impl Lru {
    fn touch(&mut self, key: &str, size: usize) {
        self.tick += 1;
        if let Some((tick, old)) = self.entries.insert(key.to_owned(), (self.tick, size)) {
            self.order.remove(&tick);
            self.bytes -= old;
        }
        self.order.insert(self.tick, key.to_owned());
        self.bytes += size;
    }

    fn remove(&mut self, key: &str) {
        if let Some((tick, size)) = self.entries.remove(key) {
            self.order.remove(&tick);
            self.bytes -= size;
        }
    }

    /// The least recently used key while more than `limit` bytes are kept.
    fn victim(&self, limit: usize) -> Option<String> {
        (self.bytes > limit)
            .then(|| self.order.values().next().cloned())
            .flatten()
    }
}

/// The edge API's store; see the module docs.
#[derive(Debug)]
pub struct ApiCache {
    db: Database,
    limit: usize,
    lru: Mutex<Lru>,
}

/// A redb failure, as text (the edge API logs it and answers without the cache).
#[derive(Debug, thiserror::Error)]
#[error("edge API cache: {0}")]
pub struct CacheError(String);

fn failed(e: impl std::fmt::Display) -> CacheError {
    CacheError(e.to_string())
}

impl ApiCache {
    /// Opens (or creates) the file at `path` (mode 0600), keeping at most `limit` bytes of
    /// responses.
    ///
    /// # Errors
    /// The file cannot be made or opened.
    pub fn open(path: &Path, limit: usize) -> Result<Self, CacheError> {
        verge_edge_store::private_dir::ensure_file(path).map_err(failed)?;
        let db = Database::builder()
            .set_cache_size(PAGE_CACHE_BYTES)
            .create(path)
            .map_err(failed)?;
        let txn = db.begin_write().map_err(failed)?;
        for table in [TOKENS, DECISIONS, RESPONSES, ISSUER] {
            txn.open_table(table).map_err(failed)?;
        }
        txn.commit().map_err(failed)?;
        let mut lru = Lru::default();
        {
            let txn = db.begin_read().map_err(failed)?;
            let table = txn.open_table(RESPONSES).map_err(failed)?;
            for entry in table.iter().map_err(failed)? {
                let (key, value) = entry.map_err(failed)?;
                lru.touch(key.value(), key.value().len() + value.value().len());
            }
        }
        Ok(Self {
            db,
            limit,
            lru: Mutex::new(lru),
        })
    }

    fn put(
        &self,
        table: TableDefinition<&str, &[u8]>,
        key: &str,
        value: &[u8],
    ) -> Result<(), CacheError> {
        let txn = self.db.begin_write().map_err(failed)?;
        txn.open_table(table)
            .map_err(failed)?
            .insert(key, value)
            .map_err(failed)?;
        txn.commit().map_err(failed)
    }

    fn get<T: for<'de> Deserialize<'de>>(
        &self,
        table: TableDefinition<&str, &[u8]>,
        key: &str,
    ) -> Result<Option<T>, CacheError> {
        let txn = self.db.begin_read().map_err(failed)?;
        let table = txn.open_table(table).map_err(failed)?;
        let Some(value) = table.get(key).map_err(failed)? else {
            return Ok(None);
        };
        Ok(serde_json::from_slice(value.value()).ok())
    }

    /// Remembers that the API server authenticated the token of `fingerprint`.
    ///
    /// # Errors
    /// redb failed.
    pub fn remember_token(&self, fingerprint: &str, token: &KnownToken) -> Result<(), CacheError> {
        if self.token(fingerprint)?.as_ref() == Some(token) {
            return Ok(());
        }
        self.put(
            TOKENS,
            fingerprint,
            &serde_json::to_vec(token).map_err(failed)?,
        )
    }

    /// Forgets a token the API server refused (401).
    ///
    /// # Errors
    /// redb failed.
    pub fn forget_token(&self, fingerprint: &str) -> Result<(), CacheError> {
        let txn = self.db.begin_write().map_err(failed)?;
        txn.open_table(TOKENS)
            .map_err(failed)?
            .remove(fingerprint)
            .map_err(failed)?;
        txn.commit().map_err(failed)
    }

    /// The token of `fingerprint`, if the API server authenticated it.
    ///
    /// # Errors
    /// redb failed.
    pub fn token(&self, fingerprint: &str) -> Result<Option<KnownToken>, CacheError> {
        self.get(TOKENS, fingerprint)
    }

    /// Keeps what the node knows of the token issuer.
    ///
    /// # Errors
    /// redb failed.
    pub fn keep_issuer(&self, issuer: &IssuerKeys) -> Result<(), CacheError> {
        self.put(
            ISSUER,
            ISSUER_KEY,
            &serde_json::to_vec(issuer).map_err(failed)?,
        )
    }

    /// What the node kept of the token issuer (empty if nothing).
    ///
    /// # Errors
    /// redb failed.
    pub fn issuer(&self) -> Result<IssuerKeys, CacheError> {
        Ok(self.get(ISSUER, ISSUER_KEY)?.unwrap_or_default())
    }

    /// Records the API server's decision on `user`'s request `info`.
    ///
    /// # Errors
    /// redb failed.
    pub fn record_decision(
        &self,
        user: &str,
        info: &RequestInfo,
        decision: Decision,
    ) -> Result<(), CacheError> {
        let key = decision_key(user, info);
        if self
            .get::<Decision>(DECISIONS, &key)?
            .is_some_and(|d| d.allowed == decision.allowed && decision.at < d.at + 60)
        {
            return Ok(()); // Unchanged and recent: no write per request.
        }
        self.put(
            DECISIONS,
            &key,
            &serde_json::to_vec(&decision).map_err(failed)?,
        )
    }

    /// The API server's last decision on `user`'s request `info`.
    ///
    /// # Errors
    /// redb failed.
    pub fn decision(&self, user: &str, info: &RequestInfo) -> Result<Option<Decision>, CacheError> {
        self.get(DECISIONS, &decision_key(user, info))
    }

    /// Keeps `response` for the request of `key`, evicting the least recently used ones
    /// beyond the limit. A response larger than the limit is not kept.
    ///
    /// # Errors
    /// redb failed.
    pub fn keep(&self, key: &str, response: &KeptResponse) -> Result<(), CacheError> {
        let value = serde_json::to_vec(response).map_err(failed)?;
        let size = key.len() + value.len();
        if size > self.limit {
            return Ok(());
        }
        let txn = self.db.begin_write().map_err(failed)?;
        {
            let mut table = txn.open_table(RESPONSES).map_err(failed)?;
            table.insert(key, value.as_slice()).map_err(failed)?;
            let mut lru = self
                .lru
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            lru.touch(key, size);
            while let Some(victim) = lru.victim(self.limit) {
                table.remove(victim.as_str()).map_err(failed)?;
                lru.remove(&victim);
            }
        }
        txn.commit().map_err(failed)
    }

    /// The kept response for the request of `key` (made most recently used).
    ///
    /// # Errors
    /// redb failed.
    pub fn kept(&self, key: &str) -> Result<Option<KeptResponse>, CacheError> {
        let found: Option<KeptResponse> = self.get(RESPONSES, key)?;
        if found.is_some() {
            let mut lru = self
                .lru
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(&(_, size)) = lru.entries.get(key) {
                lru.touch(key, size);
            }
        }
        Ok(found)
    }

    /// Bytes of responses kept now.
    pub fn kept_bytes(&self) -> usize {
        self.lru
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .bytes
    }
}

/// The key of a decision: the user and the request as the API server authorizes it.
fn decision_key(user: &str, info: &RequestInfo) -> String {
    match info {
        RequestInfo::Resource(r) => format!(
            "{user}\n{}\n{}\n{}\n{}\n{}\n{}",
            r.verb,
            r.group,
            r.resource,
            r.subresource.as_deref().unwrap_or_default(),
            r.namespace.as_deref().unwrap_or_default(),
            r.name.as_deref().unwrap_or_default(),
        ),
        RequestInfo::NonResource { verb, path } => format!("{user}\n{verb}\n{path}"),
    }
}

/// The query parameters that do not change which objects a read returns, left out of
/// [`response_key`] (a client asks with a new `resourceVersion` or timeout each time).
pub const VOLATILE: &[&str] = &[
    "resourceVersion",
    "resourceVersionMatch",
    "timeout",
    "timeoutSeconds",
    "allowWatchBookmarks",
    "sendInitialEvents",
];

/// The key a read is kept under: its path, its query without the [`VOLATILE`] parameters
/// (in order) and its `Accept` header (JSON, protobuf, table and discovery answers differ).
pub fn response_key(path: &str, query: Option<&str>, accept: Option<&str>) -> String {
    let mut params: Vec<(&str, &str)> = query
        .map(|q| {
            form_pairs(q)
                .filter(|(k, _)| !VOLATILE.contains(k))
                .collect()
        })
        .unwrap_or_default();
    params.sort_unstable();
    let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{path}?{}\n{}", query.join("&"), accept.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(bytes: usize) -> KeptResponse {
        KeptResponse {
            status: 200,
            content_type: Some("application/json".into()),
            at: 1,
            body: vec![b'x'; bytes],
        }
    }

    #[test]
    fn responses_are_bounded_least_recently_used_first() -> Result<(), CacheError> {
        let dir = tempfile::tempdir().map_err(failed)?;
        let path = dir.path().join("cache.redb");
        let cache = ApiCache::open(&path, 2000)?;
        cache.keep("a", &response(500))?;
        cache.keep("b", &response(500))?;
        assert!(cache.kept("a")?.is_some()); // a is now more recent than b
        cache.keep("c", &response(500))?;
        assert!(cache.kept_bytes() <= 2000);
        assert!(cache.kept("b")?.is_none(), "b was least recently used");
        assert!(cache.kept("a")?.is_some() && cache.kept("c")?.is_some());
        cache.keep("huge", &response(10_000))?;
        assert!(
            cache.kept("huge")?.is_none(),
            "larger than the limit: not kept"
        );
        drop(cache);
        let again = ApiCache::open(&path, 2000)?;
        assert_eq!(
            again.kept("c")?.map(|r| r.body.len()),
            Some(500),
            "kept across restarts"
        );
        Ok(())
    }

    #[test]
    fn decisions_and_tokens_are_kept() -> Result<(), CacheError> {
        let dir = tempfile::tempdir().map_err(failed)?;
        let cache = ApiCache::open(&dir.path().join("cache.redb"), 1 << 20)?;
        let info = crate::request::parse(&http::Method::GET, "/api/v1/namespaces/a/secrets", None);
        cache.record_decision(
            "u",
            &info,
            Decision {
                allowed: false,
                at: 5,
            },
        )?;
        assert_eq!(cache.decision("u", &info)?.map(|d| d.allowed), Some(false));
        assert_eq!(cache.decision("v", &info)?, None, "per user");
        let token = KnownToken {
            user: "u".into(),
            exp: Some(9),
            pod_uid: None,
        };
        cache.remember_token("f", &token)?;
        assert_eq!(cache.token("f")?, Some(token));
        cache.forget_token("f")?;
        assert_eq!(cache.token("f")?, None);
        assert!(cache.issuer()?.issuers.is_empty());
        let mut issuer = IssuerKeys::default();
        issuer.audiences.insert("api".into());
        cache.keep_issuer(&issuer)?;
        assert_eq!(cache.issuer()?.audiences, issuer.audiences);
        assert_eq!(
            response_key(
                "/api/v1/pods",
                Some("resourceVersion=5&limit=500&labelSelector=a"),
                None
            ),
            response_key("/api/v1/pods", Some("labelSelector=a&limit=500"), None),
        );
        Ok(())
    }
}
