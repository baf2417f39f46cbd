//! `podCertificate` projected volume sources (the kubelet's podcertificate manager and the
//! projected plugin's `collectData`).
//!
//! Each source of each pod has a state, as the kubelet's `credStore`:
//!
//! ```text
//! (none) --request--> Wait --issued--> Fresh --beginRefreshAt--> WaitRefresh --issued--> Fresh
//!                       |                                           |
//!                       +--denied/failed--> Terminal <--------------+
//! ```
//!
//! A request is a new private key of the source's `keyType` ([`verge_pki::workload`]) and a
//! PodCertificateRequest created through the cloud; the key stays on the node. While the
//! first certificate is not issued the mount fails (`credential bundle is not issued yet`) and
//! the pod worker tries again, each try reading the request back. Once issued, the
//! credentials are served until `beginRefreshAt` (plus up to 5 minutes of jitter, as the
//! kubelet), then a new request is made while the old credentials are still served. A
//! request that stays invisible for 10 minutes counts as deleted and is made again; a denied
//! or failed one fails the mount for good (the kubelet's terminal states).
//!
//! Offline autonomy: issued credentials are also written to
//! `<pods_dir>/<pod uid>/podcertificates.json` (mode 0600 in the private pod directory, like
//! `tokens.json`) and read back when none are in memory, so a pod restarted by a new edgecore
//! process while the cloud is unreachable gets them (the kubelet, which keeps nothing, would
//! ask again).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::certificates::v1::{PodCertificateRequest, PodCertificateRequestSpec};
use k8s_openapi::api::core::v1::{Pod, PodCertificateProjection};
use tracing::{info, warn};
use verge_pki::PrivateKeyPem;
use verge_pki::workload::{self, WorkloadKeyType};
use verge_runtime::ErrorChain;

use super::payload::Failure;
use super::trust_bundle::pem_blocks;
use crate::objects::{PodObjects, service_account};

/// The kubelet's `assumeDeletedThreshold`: a request not seen this long after it was made
/// counts as deleted.
const ABANDON_AFTER: Duration = Duration::from_secs(10 * 60);

/// The kubelet's refresh jitter: up to this much is added to `beginRefreshAt`.
const REFRESH_JITTER: Duration = Duration::from_secs(5 * 60);

/// The mount failure while the first certificate is not issued.
pub(super) const NOT_ISSUED: &str = "credential bundle is not issued yet";

/// Issued credentials: the private key (PKCS#8 PEM) and the certificate chain (PEM, leaf
/// first), with when to refresh them and when they expire.
#[derive(Clone)]
pub(super) struct Issued {
    /// The private key.
    pub key: PrivateKeyPem,
    /// The chain, every block re-encoded as `CERTIFICATE` (the kubelet's
    /// `cleanCertificateChain`).
    pub chain: Vec<u8>,
    begin_refresh_at: SystemTime,
    not_after: SystemTime,
}

/// A request made and not answered yet.
#[derive(Clone)]
struct Pending {
    key: PrivateKeyPem,
    name: String,
    abandon_at: SystemTime,
}

#[derive(Clone)]
enum State {
    Wait(Pending),
    Fresh(Issued),
    WaitRefresh(Issued, Pending),
    /// Denied or failed for good: the mount failure.
    Terminal(String),
}

/// (pod uid, volume name, index of the source in the volume).
type Key = (String, String, usize);

/// Every source's state, in memory and (issued credentials) in each pod's directory. Its
/// `Debug` shows the count only, never a key.
pub(super) struct PodCertificates {
    states: Mutex<HashMap<Key, State>>,
    pods_dir: PathBuf,
}

impl std::fmt::Debug for PodCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodCertificates")
            .field("sources", &self.lock().len())
            .field("pods_dir", &self.pods_dir)
            .finish()
    }
}

/// What a request's status says.
enum Outcome {
    Issued(Issued),
    /// Denied or Failed: the kubelet's message.
    Refused(String),
    Pending,
}

fn outcome(request: &PodCertificateRequest, now: SystemTime, key: &PrivateKeyPem) -> Outcome {
    let Some(status) = &request.status else {
        return Outcome::Pending;
    };
    let name = format!(
        "{}/{}",
        request.metadata.namespace.as_deref().unwrap_or_default(),
        request.metadata.name.as_deref().unwrap_or_default()
    );
    for condition in status.conditions.iter().flatten() {
        let (reason, message) = (&condition.reason, &condition.message);
        match condition.type_.as_str() {
            "Denied" => {
                return Outcome::Refused(format!(
                    "PodCertificateRequest {name} was permanently denied: reason={reason:?} \
                     message={message:?}"
                ));
            }
            "Failed" => {
                return Outcome::Refused(format!(
                    "PodCertificateRequest {name} was permanently failed: reason={reason:?} \
                     message={message:?}"
                ));
            }
            "Issued" => {
                let time = |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
                    t.and_then(|t| u64::try_from(t.0.as_second()).ok())
                        .map(|s| UNIX_EPOCH + Duration::from_secs(s))
                };
                let not_after =
                    time(status.not_after.as_ref()).unwrap_or(now + Duration::from_secs(3600));
                let begin = time(status.begin_refresh_at.as_ref()).unwrap_or(not_after);
                let jitter = Duration::from_millis(rand::random_range(
                    0..u64::try_from(REFRESH_JITTER.as_millis()).unwrap_or(1),
                ));
                let chain = status.certificate_chain.as_deref().unwrap_or_default();
                return Outcome::Issued(Issued {
                    key: key.clone(),
                    chain: pem_blocks(chain)
                        .iter()
                        .flat_map(|der| verge_pki::pem_io::cert_to_pem(der).into_bytes())
                        .collect(),
                    begin_refresh_at: begin + jitter,
                    not_after,
                });
            }
            _ => {}
        }
    }
    Outcome::Pending
}

impl PodCertificates {
    /// Sources persisting under `pods_dir` (`<data_dir>/pods`).
    pub(super) fn new(pods_dir: PathBuf) -> Self {
        Self {
            states: Mutex::default(),
            pods_dir,
        }
    }

    /// The credentials of `source`, the `index`-th source of `volume` of `pod`, at `now`,
    /// taking the next step of the source's state first (see the module docs).
    ///
    /// # Errors
    /// [`Failure::Reason`] while not issued yet ([`NOT_ISSUED`]), once denied or failed, or
    /// for a `keyType` edged cannot make; [`Failure::Other`] when the cloud cannot be asked
    /// and nothing is issued.
    pub(super) async fn get<O: PodObjects>(
        &self,
        objects: &O,
        pod: &Pod,
        volume: &str,
        index: usize,
        source: &PodCertificateProjection,
        now: SystemTime,
    ) -> Result<Issued, Failure> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        self.load(&uid);
        let key = (uid.clone(), volume.to_owned(), index);
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let state = self.lock().get(&key).cloned();
        let next = match state {
            None => Some(State::Wait(request(objects, pod, source, now).await?)),
            Some(State::Wait(pending)) => {
                match objects.pod_certificate_request(ns, &pending.name).await? {
                    Some(pcr) => match outcome(&pcr, now, &pending.key) {
                        Outcome::Issued(issued) => Some(State::Fresh(issued)),
                        Outcome::Refused(reason) => Some(State::Terminal(reason)),
                        Outcome::Pending => Some(State::Wait(pending)),
                    },
                    None if now >= pending.abandon_at => None,
                    None => Some(State::Wait(pending)),
                }
            }
            Some(State::Fresh(current)) if now >= current.begin_refresh_at => {
                match request(objects, pod, source, now).await {
                    Ok(pending) => Some(State::WaitRefresh(current, pending)),
                    Err(e) => {
                        log_kept(volume, &e);
                        Some(State::Fresh(current))
                    }
                }
            }
            Some(State::WaitRefresh(current, pending)) => {
                match objects.pod_certificate_request(ns, &pending.name).await {
                    Ok(Some(pcr)) => match outcome(&pcr, now, &pending.key) {
                        Outcome::Issued(issued) => Some(State::Fresh(issued)),
                        Outcome::Refused(reason) => Some(State::Terminal(reason)),
                        Outcome::Pending => Some(State::WaitRefresh(current, pending)),
                    },
                    Ok(None) if now >= pending.abandon_at => Some(State::Fresh(current)),
                    Ok(None) => Some(State::WaitRefresh(current, pending)),
                    Err(e) => {
                        log_kept(volume, &Failure::Other(e));
                        Some(State::WaitRefresh(current, pending))
                    }
                }
            }
            unchanged => unchanged,
        };
        let issued_now = matches!(&next, Some(State::Fresh(_)));
        {
            let mut states = self.lock();
            match &next {
                Some(state) => states.insert(key, state.clone()),
                None => states.remove(&key),
            };
        }
        if issued_now {
            self.persist(&uid);
        }
        match next {
            Some(State::Fresh(issued) | State::WaitRefresh(issued, _)) => Ok(issued),
            Some(State::Terminal(reason)) => Err(Failure::Reason(reason)),
            Some(State::Wait(_)) => Err(Failure::Reason(NOT_ISSUED.into())),
            None => Err(Failure::Reason(
                "PodCertificateRequest appears to have been deleted; requesting again".into(),
            )),
        }
    }

    /// When a source of the pod `uid` is next due: the earliest `beginRefreshAt` (with its
    /// jitter) of its issued credentials; in the past while a refresh waits for the signer.
    pub(super) fn next_due(&self, uid: &str) -> Option<SystemTime> {
        self.lock()
            .iter()
            .filter(|((u, _, _), _)| u == uid)
            .filter_map(|(_, state)| match state {
                State::Fresh(i) | State::WaitRefresh(i, _) => Some(i.begin_refresh_at),
                State::Wait(_) | State::Terminal(_) => None,
            })
            .min()
    }

    /// Forgets every source of the pod `uid` (its file goes with the pod directory).
    pub(super) fn forget(&self, uid: &str) {
        self.lock().retain(|(u, _, _), _| u != uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, State>> {
        self.states.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn log_kept(volume: &str, e: &Failure) {
    match e {
        Failure::Other(e) => {
            warn!(volume, error = %ErrorChain(e), "pod certificate not refreshed; serving the current one");
        }
        Failure::Reason(reason) => {
            warn!(volume, %reason, "pod certificate not refreshed; serving the current one");
        }
    }
}

/// A new key for `source` and the PodCertificateRequest for it, created through `objects`.
async fn request<O: PodObjects>(
    objects: &O,
    pod: &Pod,
    source: &PodCertificateProjection,
    now: SystemTime,
) -> Result<Pending, Failure> {
    let key_type: WorkloadKeyType = source
        .key_type
        .parse()
        .map_err(|e: verge_pki::Error| Failure::Reason(e.to_string()))?;
    let made = tokio::task::spawn_blocking(move || workload::generate(key_type))
        .await
        .map_err(|e| Failure::Reason(format!("while generating keypair: {e}")))?
        .map_err(|e| Failure::Reason(format!("while generating keypair: {}", ErrorChain(&e))))?;
    let request = PodCertificateRequest {
        spec: PodCertificateRequestSpec {
            signer_name: source.signer_name.clone(),
            pod_name: pod.metadata.name.clone().unwrap_or_default(),
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            service_account_name: service_account(pod).to_owned(),
            max_expiration_seconds: source.max_expiration_seconds,
            stub_pkc_s10_request: k8s_openapi::ByteString(made.stub_csr_der),
            unverified_user_annotations: source.user_annotations.clone(),
            ..PodCertificateRequestSpec::default()
        },
        ..PodCertificateRequest::default()
    };
    let created = objects.create_pod_certificate_request(pod, request).await?;
    let name = created.metadata.name.unwrap_or_default();
    info!(request = %name, signer = %source.signer_name, "pod certificate requested");
    Ok(Pending {
        key: made.key,
        name,
        abandon_at: now + ABANDON_AFTER,
    })
}

mod persist;

#[cfg(test)]
mod tests;
