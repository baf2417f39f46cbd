//! The bench's client inside an edge pod: a thread that joins the pod's network namespace
//! (`setns` on `/proc/<pid>/ns/net` of its container) and makes HTTP/1.0 requests from
//! there, so every connection takes the pod's path (its veth, the bridge, the node's rules)
//! without a `docker exec` per request. And the cloud endpoint: an HTTP server of the bench
//! on the host, reached through cloudhub.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd as _;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};

/// What one target gave: each request's latency, and the best bulk throughput.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Latency of each small request (connect, request, whole answer), sorted.
    pub latencies: Vec<Duration>,
    /// Best MB/s of `GET /big`.
    pub mbps: f64,
}

/// One `GET <path>` to `addr` on a new connection: time to the end of the answer, and bytes.
fn get(addr: SocketAddr, path: &str) -> anyhow::Result<(Duration, u64)> {
    let started = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("connect {addr}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    ensure!(total > 0, "{addr}{path}: empty answer");
    Ok((started.elapsed(), total))
}

/// In the network namespace of process `pid`: `warmup` then `requests` small requests to
/// every target, interleaved round by round, each round starting at the next target (so drift
/// and the order hit all alike), then `bulk` runs of
/// `GET /big` of `big_bytes` each. One [`Measured`] per target, in order.
///
/// # Errors
/// The namespace cannot be joined, or a request fails.
pub fn measure_in(
    pid: u32,
    targets: Vec<SocketAddr>,
    warmup: usize,
    requests: usize,
    bulk: usize,
    big_bytes: u64,
) -> anyhow::Result<Vec<Measured>> {
    std::thread::spawn(move || -> anyhow::Result<Vec<Measured>> {
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/net"))
            .with_context(|| format!("open the network namespace of {pid}"))?;
        move_into_link_name_space(ns.as_fd(), Some(LinkNameSpaceType::Network)).context("setns")?;
        let mut out = vec![Measured::default(); targets.len()];
        let n = targets.len();
        for round in 0..warmup + requests {
            // Each round starts at another target, so no path always follows the same one.
            for k in 0..n {
                let i = (round + k) % n;
                let target = &targets[i];
                let (took, _) = get(*target, "/")?;
                if round >= warmup {
                    out[i].latencies.push(took);
                }
            }
        }
        for _ in 0..bulk {
            for (i, target) in targets.iter().enumerate() {
                let (took, bytes) = get(*target, "/big")?;
                ensure!(bytes >= big_bytes, "{target}/big: {bytes} bytes");
                out[i].mbps = out[i].mbps.max(bytes as f64 / 1e6 / took.as_secs_f64());
            }
        }
        for m in &mut out {
            m.latencies.sort();
        }
        Ok(out)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the client thread panicked"))?
}

/// Serves `/` (a short body) and `/big` (`big_bytes` zeros) over HTTP/1.0 on `listener`, a
/// thread per connection, until the process ends.
pub fn serve(listener: TcpListener, big_bytes: u64) {
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || answer(conn, big_bytes));
        }
    });
}

fn answer(mut conn: TcpStream, big_bytes: u64) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        request.extend_from_slice(&buf[..n]);
    }
    if request.starts_with(b"GET /big") {
        conn.write_all(
            format!("HTTP/1.0 200 OK\r\nContent-Length: {big_bytes}\r\n\r\n").as_bytes(),
        )?;
        let chunk = vec![0u8; 256 * 1024];
        let mut left = big_bytes;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            conn.write_all(&chunk[..n])?;
            left -= n as u64;
        }
    } else {
        conn.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\ncloud\n")?;
    }
    Ok(())
}
