//! [`DeviceTwinConfig`]: the `deviceTwin:` section (KubeEdge `modules.deviceTwin`): the DMI
//! socket mappers register on, and how edgecore calls mappers.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// devicetwin and the DMI server (YAML `deviceTwin:`); every field optional.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct DeviceTwinConfig {
    /// Whether devicetwin runs (device twins, the DMI server, calls to mappers). Default
    /// `true`.
    pub enable: bool,
    /// The unix socket of the DMI `DeviceManagerService` that mappers register and report
    /// on (KubeEdge `deviceTwin.dmiSockPath`). Its directory is created (0755) if missing; a
    /// stale socket file is replaced. Default `/etc/kubeedge/dmi.sock`.
    pub dmi_socket: PathBuf,
    /// Permission bits of the socket, octal text: `"0600"` (only edgecore's user, normally
    /// root, as mappers run) or `"0660"` (also its group). Default `"0600"`.
    pub dmi_socket_mode: String,
    /// Bound on each call to a mapper (RegisterDevice, UpdateDevice, ...), including
    /// connecting to its socket. Default `10s` (KubeEdge's).
    #[serde(with = "humantime_serde")]
    pub mapper_call_timeout: Duration,
    /// First delay before calling a mapper again after a failed call; doubles per failure.
    /// Default `1s`.
    #[serde(with = "humantime_serde")]
    pub mapper_retry_backoff: Duration,
    /// Largest delay between attempts to call a failing mapper. Default `1m`.
    #[serde(with = "humantime_serde")]
    pub mapper_retry_max_backoff: Duration,
    /// DMI reports (`ReportDeviceStatus`, `ReportDeviceStates`) accepted per second from one
    /// mapper (per protocol); beyond that a report is answered `RESOURCE_EXHAUSTED`
    /// (registrations are bounded by `maxMappers`). Default 1000.
    pub mapper_request_rate: u32,
    /// Reports a mapper may send in a burst above `mapperRequestRate`. Default 2000.
    pub mapper_request_burst: u32,
    /// The directory every mapper's own socket (`MapperRegister`'s `address`) must be in: a
    /// registration naming a socket elsewhere is refused, so a mapper cannot point edgecore
    /// at another service's socket. Default: the DMI socket's directory (`/etc/kubeedge`,
    /// where KubeEdge's mappers put theirs).
    pub mapper_socket_dir: Option<PathBuf>,
    /// Most protocols registered at once (one mapper each); registering a further protocol
    /// is `RESOURCE_EXHAUSTED`. Default 64.
    pub max_mappers: usize,
    /// Protocols whose registration any process may take over, newest first (KubeEdge's
    /// behaviour). For every other protocol the process that registered it owns it while it
    /// runs: another process's registration or report is `PERMISSION_DENIED`. Default none.
    pub shared_protocols: Vec<String>,
}

impl Default for DeviceTwinConfig {
    fn default() -> Self {
        Self {
            enable: true,
            dmi_socket: PathBuf::from("/etc/kubeedge/dmi.sock"),
            dmi_socket_mode: "0600".to_owned(),
            mapper_call_timeout: Duration::from_secs(10),
            mapper_retry_backoff: Duration::from_secs(1),
            mapper_retry_max_backoff: Duration::from_secs(60),
            mapper_request_rate: 1000,
            mapper_request_burst: 2000,
            mapper_socket_dir: None,
            max_mappers: 64,
            shared_protocols: Vec::new(),
        }
    }
}

impl DeviceTwinConfig {
    /// The socket mode as bits.
    ///
    /// # Errors
    /// The field name and what is wrong: not octal, or not one of `0600`, `0660`.
    pub fn socket_mode(&self) -> Result<u32, (&'static str, String)> {
        match u32::from_str_radix(self.dmi_socket_mode.trim_start_matches("0o"), 8) {
            Ok(mode @ (0o600 | 0o660)) => Ok(mode),
            _ => Err((
                "deviceTwin.dmiSocketMode",
                format!("{:?} is not \"0600\" or \"0660\"", self.dmi_socket_mode),
            )),
        }
    }

    /// The directory mapper sockets must be in (`mapperSocketDir`, else the DMI socket's).
    pub fn mapper_socket_dir(&self) -> PathBuf {
        self.mapper_socket_dir.clone().unwrap_or_else(|| {
            self.dmi_socket
                .parent()
                .map(std::path::Path::to_path_buf)
                .unwrap_or_default()
        })
    }

    /// Checks values that parse but cannot work.
    ///
    /// # Errors
    /// The name of the first bad field and what is wrong with it.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if !self.enable {
            return Ok(());
        }
        if !self.dmi_socket.is_absolute() {
            return Err((
                "deviceTwin.dmiSocket",
                "must be an absolute path".to_owned(),
            ));
        }
        self.socket_mode()?;
        if self.mapper_call_timeout.is_zero() || self.mapper_retry_backoff.is_zero() {
            return Err((
                "deviceTwin.mapperCallTimeout",
                "timeouts and delays must be greater than zero".to_owned(),
            ));
        }
        if self.mapper_retry_max_backoff < self.mapper_retry_backoff {
            return Err((
                "deviceTwin.mapperRetryMaxBackoff",
                "must be at least mapperRetryBackoff".to_owned(),
            ));
        }
        if !self.mapper_socket_dir().is_absolute() {
            return Err((
                "deviceTwin.mapperSocketDir",
                "must be an absolute path".to_owned(),
            ));
        }
        if self.max_mappers == 0 {
            return Err(("deviceTwin.maxMappers", "must be at least 1".to_owned()));
        }
        if self.mapper_request_rate == 0 || self.mapper_request_burst == 0 {
            return Err((
                "deviceTwin.mapperRequestRate",
                "rate and burst must be at least 1".to_owned(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_modes() {
        let mut c = DeviceTwinConfig::default();
        assert_eq!(c.socket_mode(), Ok(0o600));
        c.dmi_socket_mode = "0660".into();
        assert_eq!(c.socket_mode(), Ok(0o660));
        for bad in ["0666", "rw", "0777", ""] {
            c.dmi_socket_mode = bad.into();
            assert!(c.validate().is_err(), "{bad}");
        }
    }
}
