//! Free TCP ports for components that a test or the quickstart starts and that bind their
//! port themselves later.
//!
//! A port is picked below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`), so
//! no outgoing connection can take it between the pick and the component's own bind, and at
//! a random place, so parallel test binaries rarely try the same one. Each port is handed out
//! at most once per process.

use std::collections::HashSet;
use std::hash::{BuildHasher as _, RandomState};
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;

use anyhow::Context as _;

/// Lowest port handed out.
const LOW: u16 = 10_000;

/// Ports handed out by this process.
static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// The first port of the ephemeral range (32768 when it cannot be read).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .filter(|&p: &u16| p > LOW + 1_000)
        .unwrap_or(32_768)
}

/// One TCP port that nothing listens on (checked by binding `0.0.0.0:port`), below the
/// ephemeral range and not handed out before by this process.
///
/// # Errors
/// No free port found after trying every candidate.
pub fn free_port() -> anyhow::Result<u16> {
    let high = ephemeral_start();
    let span = u64::from(high - LOW);
    let start = RandomState::new().hash_one(std::process::id()) % span;
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let given = given.get_or_insert_with(HashSet::new);
    for i in 0..span {
        let port = LOW + u16::try_from((start + i) % span).context("port out of range")?;
        if given.contains(&port) || TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).is_err() {
            continue;
        }
        given.insert(port);
        return Ok(port);
    }
    anyhow::bail!("no free TCP port in {LOW}..{high}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..20).map(|_| free_port().expect("a free port")).collect();
        let distinct: HashSet<_> = ports.iter().collect();
        assert_eq!(distinct.len(), ports.len());
        assert!(ports.iter().all(|&p| (LOW..ephemeral_start()).contains(&p)));
    }
}
