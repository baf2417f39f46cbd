//! [`BrokerAddress`]: `eventBus.mqttServer` parsed.

use std::fmt;

/// The default MQTT port.
pub const DEFAULT_PORT: u16 = 1883;

/// The broker's host and port, from `tcp://<host>[:<port>]` or `mqtt://<host>[:<port>]`
/// (KubeEdge writes `tcp://127.0.0.1:1883`). IPv6 hosts in brackets: `tcp://[::1]:1883`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerAddress {
    /// Host name or IP address, without brackets.
    pub host: String,
    /// TCP port (default 1883).
    pub port: u16,
}

/// Why an `mqttServer` value is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// The text is not a URI.
    #[error("{0:?} is not a URI like tcp://127.0.0.1:1883")]
    NotUri(String),
    /// The scheme is not `tcp` or `mqtt`.
    #[error("scheme {0:?} is not supported: use tcp:// or mqtt:// (TLS is not supported)")]
    Scheme(String),
    /// No host, a bad port, or user info, a path or a query.
    #[error("{0:?} must be just <scheme>://<host>[:<port>] with a port up to 65535")]
    Shape(String),
}

impl BrokerAddress {
    /// Parses `text`.
    ///
    /// # Errors
    /// [`AddressError`] naming what is wrong.
    pub fn parse(text: &str) -> Result<Self, AddressError> {
        let uri: http::Uri = text
            .parse()
            .map_err(|_| AddressError::NotUri(text.to_owned()))?;
        let scheme = uri.scheme_str().unwrap_or_default();
        if !matches!(scheme, "tcp" | "mqtt") {
            return Err(AddressError::Scheme(scheme.to_owned()));
        }
        let shape = || AddressError::Shape(text.to_owned());
        let authority = uri.authority().ok_or_else(shape)?;
        let path_ok = matches!(uri.path(), "" | "/") && uri.query().is_none();
        if authority.as_str().contains('@') || !path_ok {
            return Err(shape());
        }
        // `host()` keeps an IPv6 address's brackets; what follows it is `:<port>` or nothing
        // (`port()` would hide a port that does not fit 16 bits).
        let bracketed = authority.host();
        let port = match authority.as_str().strip_prefix(bracketed) {
            Some("") => DEFAULT_PORT,
            Some(rest) => rest
                .strip_prefix(':')
                .and_then(|p| p.parse().ok())
                .ok_or_else(shape)?,
            None => return Err(shape()),
        };
        let host = bracketed.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(shape());
        }
        Ok(Self {
            host: host.to_owned(),
            port,
        })
    }
}

impl fmt::Display for BrokerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeedge_forms_parse() {
        let a = BrokerAddress::parse("tcp://127.0.0.1:1883").expect("valid");
        assert_eq!((a.host.as_str(), a.port), ("127.0.0.1", 1883));
        let a = BrokerAddress::parse("mqtt://broker.local").expect("valid");
        assert_eq!((a.host.as_str(), a.port), ("broker.local", 1883));
        let a = BrokerAddress::parse("tcp://[::1]:1884/").expect("valid");
        assert_eq!((a.host.as_str(), a.port), ("::1", 1884));
        assert_eq!(a.to_string(), "[::1]:1884");
    }

    #[test]
    fn other_forms_are_refused() {
        for text in [
            "",
            "127.0.0.1:1883",
            "ssl://b:8883",
            "ws://b",
            "tcp://u:p@b:1883",
            "tcp://b:1883/x",
            "tcp://b:1883?q=1",
            "tcp://b:99999",
        ] {
            assert!(BrokerAddress::parse(text).is_err(), "{text}");
        }
    }
}
