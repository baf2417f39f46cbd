//! The YAML `leaderElection:` section of a controller's configuration: whether replicas
//! elect a leader, on which `coordination.k8s.io/v1` Lease, with which timings (the
//! defaults and the rules between them are client-go leaderelection's, as used by
//! kube-controller-manager), and who this replica is.

use std::time::Duration;

use serde::Deserialize;

use super::Error;
use crate::config::DEFAULT_NAMESPACE;

/// Leader election of a controller's replicas (YAML `leaderElection:`). Every field is
/// optional; an unknown field is an error. Durations are humantime strings (`"15s"`).
///
/// ```yaml
/// leaderElection:
///   leaderElect: true
///   leaseName: edgecontroller
///   leaseNamespace: verge-system
///   leaseDuration: 15s
///   renewDeadline: 10s
///   retryPeriod: 2s
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct LeaderElectionConfig {
    /// Whether replicas elect a leader; only the leader attaches to cloudhub and acts.
    /// `false`: this process acts at once (a single replica). Default `true`, as
    /// kube-controller-manager's `--leader-elect`.
    pub leader_elect: bool,
    /// Name of the Lease. Default: the controller's name (e.g. `edgecontroller`). Every
    /// group of replicas that elects its own leader needs its own name.
    pub lease_name: Option<String>,
    /// Namespace of the Lease. Default `verge-system`.
    pub lease_namespace: String,
    /// How long a standby waits, after it last saw the Lease change, before it may take a
    /// Lease that is not renewed (written to the Lease as `leaseDurationSeconds`, rounded up
    /// to whole seconds). Must exceed `renewDeadline`. Default `15s`.
    #[serde(with = "humantime_serde")]
    pub lease_duration: Duration,
    /// How long the leader keeps retrying to renew before it gives up leading (and stops
    /// acting). Must exceed 1.2 × `retryPeriod`. Default `10s`.
    #[serde(with = "humantime_serde")]
    pub renew_deadline: Duration,
    /// Interval between acquire or renew attempts (a standby waits between 1 and 2.2 times
    /// this, jittered). Default `2s`.
    #[serde(with = "humantime_serde")]
    pub retry_period: Duration,
    /// This replica's name in the Lease's `holderIdentity`; unique among the replicas.
    /// Default: `$POD_NAME` (set from the downward API), else `<hostname>_<random uuid>`.
    pub identity: Option<String>,
}

/// client-go's `JitterFactor`: a standby retries after up to `(1 + 1.2) × retryPeriod`,
/// and `renewDeadline` must exceed `1.2 × retryPeriod`.
pub const JITTER_FACTOR: f64 = 1.2;

/// The environment variable naming this replica's pod (downward API `metadata.name`).
pub const POD_NAME_ENV: &str = "POD_NAME";

impl Default for LeaderElectionConfig {
    fn default() -> Self {
        Self {
            leader_elect: true,
            lease_name: None,
            lease_namespace: DEFAULT_NAMESPACE.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            identity: None,
        }
    }
}

impl LeaderElectionConfig {
    /// Checks the timings as client-go's `NewLeaderElector` does: `retryPeriod` > 0,
    /// `renewDeadline` > 1.2 × `retryPeriod`, `leaseDuration` > `renewDeadline`; and that
    /// the lease name and identity, when set, are not empty.
    ///
    /// # Errors
    /// [`Error::Config`] naming the broken rule.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |reason: &'static str| Err(Error::Config(reason));
        if self.retry_period.is_zero() {
            return bad("retryPeriod must be greater than zero");
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return bad("renewDeadline must be greater than 1.2 × retryPeriod");
        }
        if self.lease_duration <= self.renew_deadline {
            return bad("leaseDuration must be greater than renewDeadline");
        }
        if self.lease_name.as_deref() == Some("") || self.lease_namespace.is_empty() {
            return bad("leaseName and leaseNamespace must not be empty");
        }
        if self.identity.as_deref() == Some("") {
            return bad("identity must not be empty");
        }
        Ok(())
    }

    /// The Lease's name: `leaseName`, or `controller`.
    pub fn lease_name_or<'a>(&'a self, controller: &'a str) -> &'a str {
        self.lease_name.as_deref().unwrap_or(controller)
    }

    /// `leaseDurationSeconds` to write: `leaseDuration` rounded up to whole seconds (at
    /// least one).
    pub fn lease_duration_seconds(&self) -> i32 {
        let d = self.lease_duration;
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
    }

    /// This replica's identity: `identity`, else a non-empty `$POD_NAME`, else
    /// `<hostname>_<uuid v4>` (kube-controller-manager's default).
    pub fn resolve_identity(&self) -> String {
        if let Some(identity) = &self.identity {
            return identity.clone();
        }
        if let Ok(pod) = std::env::var(POD_NAME_ENV)
            && !pod.is_empty()
        {
            return pod;
        }
        let host = hostname::get()
            .ok()
            .and_then(|h| h.into_string().ok())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "controller".to_owned());
        format!("{host}_{}", uuid::Uuid::new_v4())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<LeaderElectionConfig, verge_core::ConfigError> {
        verge_core::from_yaml(yaml, "t")
    }

    #[test]
    fn defaults_are_client_go_s() {
        let c = parse("").expect("ok");
        assert_eq!(c, LeaderElectionConfig::default());
        assert!(c.leader_elect);
        assert_eq!(c.lease_namespace, "verge-system");
        assert_eq!(c.lease_name_or("edgecontroller"), "edgecontroller");
        assert_eq!(
            (c.lease_duration, c.renew_deadline, c.retry_period),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
        assert_eq!(c.lease_duration_seconds(), 15);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn fields_parse_and_unknown_ones_are_refused() {
        let c = parse(
            "leaderElect: false\nleaseName: ec-7\nleaseNamespace: ns\nleaseDuration: 2500ms\n\
             renewDeadline: 2s\nretryPeriod: 500ms\nidentity: pod-a\n",
        )
        .expect("ok");
        assert!(!c.leader_elect);
        assert_eq!(c.lease_name_or("edgecontroller"), "ec-7");
        assert_eq!(c.lease_duration_seconds(), 3, "rounded up");
        assert_eq!(c.resolve_identity(), "pod-a");
        assert!(c.validate().is_ok());
        let e = parse("leaseDurationSeconds: 3\n").expect_err("unknown");
        assert!(e.to_string().contains("leaseDurationSeconds"), "{e}");
    }

    #[test]
    fn timings_are_checked() {
        let base = LeaderElectionConfig::default();
        for bad in [
            LeaderElectionConfig {
                retry_period: Duration::ZERO,
                ..base.clone()
            },
            LeaderElectionConfig {
                renew_deadline: Duration::from_millis(2400),
                ..base.clone()
            },
            LeaderElectionConfig {
                lease_duration: Duration::from_secs(10),
                ..base.clone()
            },
            LeaderElectionConfig {
                lease_name: Some(String::new()),
                ..base.clone()
            },
            LeaderElectionConfig {
                identity: Some(String::new()),
                ..base.clone()
            },
        ] {
            assert!(matches!(bad.validate(), Err(Error::Config(_))), "{bad:?}");
        }
    }

    #[test]
    fn identity_defaults_to_a_unique_host_name() {
        // `POD_NAME` is not set in unit tests; never set it here (tests share the process).
        if std::env::var_os(POD_NAME_ENV).is_some() {
            return;
        }
        let c = LeaderElectionConfig::default();
        let (a, b) = (c.resolve_identity(), c.resolve_identity());
        assert_ne!(a, b);
        assert!(a.contains('_'), "{a}");
    }
}
