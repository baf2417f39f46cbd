//! The mapper's YAML configuration (camelCase, every field optional, unknown fields rejected).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Default protocol name: devices whose `spec.protocol.protocolName` is `virtual` are ours.
pub const DEFAULT_PROTOCOL: &str = "virtual";
/// Default mapper name sent in `MapperInfo.name` (edgecore keys mappers by it).
pub const DEFAULT_NAME: &str = "virtual-mapper";
/// Default socket of the mapper's own DeviceMapperService (KubeEdge's mappers use
/// `/etc/kubeedge/<protocol>.sock`).
pub const DEFAULT_SOCKET: &str = "/etc/kubeedge/virtual.sock";
/// Default socket of edgecore's DeviceManagerService (KubeEdge's `deviceTwin.dmiSockPath`).
pub const DEFAULT_DMI_SOCKET: &str = "/etc/kubeedge/dmi.sock";

/// The virtual mapper's configuration file. Durations are humantime strings (`"500ms"`).
///
/// ```yaml
/// protocol: virtual
/// name: virtual-mapper
/// socket: /etc/kubeedge/virtual.sock
/// dmiSocket: /etc/kubeedge/dmi.sock
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct Config {
    /// The protocol this mapper serves (`MapperInfo.protocol`); edgecore sends it the devices
    /// whose `spec.protocol.protocolName` equals it. Default [`DEFAULT_PROTOCOL`].
    pub protocol: String,
    /// The mapper's name (`MapperInfo.name`). Default [`DEFAULT_NAME`].
    pub name: String,
    /// Unix socket on which the mapper serves DeviceMapperService; sent to edgecore as
    /// `MapperInfo.address` (the path's bytes). A stale socket file there is replaced.
    /// Default [`DEFAULT_SOCKET`].
    pub socket: PathBuf,
    /// edgecore's DMI socket (DeviceManagerService), dialled as a plain path.
    /// Default [`DEFAULT_DMI_SOCKET`].
    pub dmi_socket: PathBuf,
    /// Deadline of one call to edgecore (register, reports). Default `1s` (mapper-framework's).
    #[serde(with = "humantime_serde")]
    pub call_timeout: Duration,
    /// Largest delay between MapperRegister attempts while edgecore does not answer (the
    /// first is 100 ms, doubling, jittered). Default `5s`.
    #[serde(with = "humantime_serde")]
    pub register_max_backoff: Duration,
    /// How long the binary waits for the mapper to stop after SIGINT/SIGTERM. Default `5s`.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            protocol: DEFAULT_PROTOCOL.to_owned(),
            name: DEFAULT_NAME.to_owned(),
            socket: PathBuf::from(DEFAULT_SOCKET),
            dmi_socket: PathBuf::from(DEFAULT_DMI_SOCKET),
            call_timeout: Duration::from_secs(1),
            register_max_backoff: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// Why a configuration file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read configuration file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid YAML for [`Config`] (e.g. an unknown field, named in the error).
    #[error("invalid configuration file {path}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The YAML error.
        #[source]
        source: serde_norway::Error,
    },
    /// `protocol` is empty (edgecore rejects such a registration).
    #[error("`protocol` must not be empty")]
    EmptyProtocol,
}

impl Config {
    /// Reads and parses `path` ([`Config::parse`]).
    ///
    /// # Errors
    /// [`ConfigError::Read`], [`ConfigError::Parse`], [`ConfigError::EmptyProtocol`].
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|error| match error {
            ConfigError::Parse { source, .. } => ConfigError::Parse {
                path: path.to_owned(),
                source,
            },
            other => other,
        })
    }

    /// Parses YAML text; an empty document is the default configuration.
    ///
    /// # Errors
    /// [`ConfigError::Parse`] (with an empty path), [`ConfigError::EmptyProtocol`].
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let config: Self = if text.trim().is_empty() {
            Self::default()
        } else {
            serde_norway::from_str(text).map_err(|source| ConfigError::Parse {
                path: PathBuf::new(),
                source,
            })?
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks what flags may have changed too.
    ///
    /// # Errors
    /// [`ConfigError::EmptyProtocol`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.protocol.is_empty() {
            return Err(ConfigError::EmptyProtocol);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_camel_case() {
        assert_eq!(Config::parse("").ok(), Some(Config::default()));
        let config = Config::parse(
            "protocol: modbus\nname: m\nsocket: /tmp/m.sock\ndmiSocket: /tmp/dmi.sock\n\
             callTimeout: 250ms\n",
        )
        .ok();
        let config = config.unwrap_or_default();
        assert_eq!(config.protocol, "modbus");
        assert_eq!(config.name, "m");
        assert_eq!(config.socket, PathBuf::from("/tmp/m.sock"));
        assert_eq!(config.dmi_socket, PathBuf::from("/tmp/dmi.sock"));
        assert_eq!(config.call_timeout, Duration::from_millis(250));
        assert_eq!(config.shutdown_grace, Duration::from_secs(5));
    }

    #[test]
    fn unknown_field_and_empty_protocol_are_errors() {
        let unknown = Config::parse("dmi_socket: /x\n");
        assert!(
            matches!(unknown, Err(ConfigError::Parse { .. })),
            "{unknown:?}"
        );
        assert!(matches!(
            Config::parse("protocol: \"\"\n"),
            Err(ConfigError::EmptyProtocol)
        ));
    }
}
