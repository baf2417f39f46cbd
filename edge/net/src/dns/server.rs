//! The node's cluster resolver over UDP and TCP: questions of the zone are answered from
//! [`ClusterNames`] (authoritative, TTL [`TTL`] as CoreDNS's default), every other question is
//! relayed as it came to the node's own resolver and its answer relayed back.
//! DNS messages are parsed and written by hickory-proto.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, CNAME, PTR, SRV};
use hickory_proto::rr::{Name, RData, Record as DnsRecord, RecordType};
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::names::{Answer, ClusterNames, QueryType, Record};

/// The TTL of the zone's records, seconds (CoreDNS `kubernetes` plugin's default).
pub const TTL: u32 = 5;

/// How long a relayed question waits for the upstream resolver.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);

/// The largest UDP message read (EDNS payloads are larger than 512).
const MAX_MESSAGE: usize = 4096;

/// The answer to the query `bytes` from the zone `names`; `None` when the question is not
/// the zone's (relay it) or the message does not parse (drop it).
pub fn answer(names: &ClusterNames, bytes: &[u8]) -> Option<Vec<u8>> {
    let request = Message::from_vec(bytes).ok()?;
    let query = request.queries().first()?.clone();
    if request.message_type() != MessageType::Query || request.op_code() != OpCode::Query {
        return None;
    }
    let qtype = match query.query_type() {
        RecordType::A => QueryType::A,
        RecordType::AAAA => QueryType::Aaaa,
        RecordType::SRV => QueryType::Srv,
        RecordType::CNAME => QueryType::Cname,
        RecordType::PTR => QueryType::Ptr,
        _ => QueryType::Other,
    };
    let name = query.name().to_ascii();
    let answer = names.answer(&name, qtype);
    if answer == Answer::NotOurs {
        return None;
    }
    let mut response = Message::new();
    response
        .set_id(request.id())
        .set_message_type(MessageType::Response)
        .set_op_code(OpCode::Query)
        .set_authoritative(true)
        .set_recursion_desired(request.recursion_desired())
        .set_recursion_available(true)
        .add_query(query.clone());
    match answer {
        Answer::Records(records) => {
            for record in records {
                let rdata = match record {
                    Record::A(ip) => RData::A(A(ip)),
                    Record::Cname(target) => RData::CNAME(CNAME(fqdn(&target)?)),
                    Record::Ptr(target) => RData::PTR(PTR(fqdn(&target)?)),
                    Record::Srv { port, target } => {
                        RData::SRV(SRV::new(0, 100, port, fqdn(&target)?))
                    }
                };
                response.add_answer(DnsRecord::from_rdata(query.name().clone(), TTL, rdata));
            }
        }
        Answer::NxDomain => {
            response.set_response_code(ResponseCode::NXDomain);
        }
        Answer::NoData | Answer::NotOurs => {}
    }
    response.to_vec().ok()
}

/// `name` as an absolute DNS name.
fn fqdn(name: &str) -> Option<Name> {
    Name::from_ascii(format!("{name}.")).ok()
}

/// Serves on `socket` until `shutdown`: the zone from the newest `names`, the rest relayed to
/// `upstream`.
pub async fn serve_udp(
    socket: UdpSocket,
    names: watch::Receiver<Arc<ClusterNames>>,
    upstream: Option<SocketAddr>,
    shutdown: CancellationToken,
) {
    let socket = Arc::new(socket);
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let (n, client) = tokio::select! {
            () = shutdown.cancelled() => return,
            r = socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(e) => {
                    warn!(error = %e, "dns: receive failed");
                    continue;
                }
            },
        };
        let query = buf[..n].to_vec();
        let zone = Arc::clone(&names.borrow());
        if let Some(reply) = answer(&zone, &query) {
            if let Err(e) = socket.send_to(&reply, client).await {
                debug!(error = %e, %client, "dns: reply not sent");
            }
            continue;
        }
        let Some(upstream) = upstream else { continue };
        let socket = Arc::clone(&socket);
        // Each relayed question waits on its own socket; a slow upstream holds nothing else.
        verge_runtime::tasks::spawn("dns-relay", async move {
            match relay(&query, upstream).await {
                Ok(reply) => {
                    let _ = socket.send_to(&reply, client).await;
                }
                Err(e) => debug!(error = %e, %upstream, "dns: relay failed"),
            }
        });
    }
}

/// How long a TCP client may stay idle between questions (RFC 7766 suggests seconds).
pub const TCP_IDLE: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves DNS over TCP on `listener` until `shutdown` (RFC 7766: each message prefixed by its
/// two-byte length, several per connection): the zone from the newest `names`, the rest
/// relayed to `upstream` (over UDP). A connection ends after [`TCP_IDLE`] without a question.
pub async fn serve_tcp(
    listener: tokio::net::TcpListener,
    names: watch::Receiver<Arc<ClusterNames>>,
    upstream: Option<SocketAddr>,
    shutdown: CancellationToken,
) {
    loop {
        let conn = tokio::select! {
            () = shutdown.cancelled() => return,
            r = listener.accept() => match r {
                Ok((conn, _)) => conn,
                Err(e) => {
                    warn!(error = %e, "dns: TCP accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (names, stop) = (names.clone(), shutdown.clone());
        verge_runtime::tasks::spawn("dns-tcp", async move {
            tokio::select! {
                () = stop.cancelled() => {}
                r = serve_tcp_connection(conn, names, upstream) => {
                    if let Err(e) = r {
                        debug!(error = %e, "dns: TCP connection ended");
                    }
                }
            }
        });
    }
}

async fn serve_tcp_connection(
    mut conn: tokio::net::TcpStream,
    names: watch::Receiver<Arc<ClusterNames>>,
    upstream: Option<SocketAddr>,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    loop {
        let len = match tokio::time::timeout(TCP_IDLE, conn.read_u16()).await {
            Err(_) => return Ok(()),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(r) => r?,
        };
        let mut query = vec![0u8; usize::from(len)];
        tokio::time::timeout(TCP_IDLE, conn.read_exact(&mut query))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "partial question"))??;
        let zone = Arc::clone(&names.borrow());
        let reply = match answer(&zone, &query) {
            Some(reply) => reply,
            None => match upstream {
                Some(upstream) => relay(&query, upstream).await?,
                None => return Ok(()),
            },
        };
        let len = u16::try_from(reply.len()).map_err(std::io::Error::other)?;
        conn.write_u16(len).await?;
        conn.write_all(&reply).await?;
    }
}

/// Sends `query` to `upstream` and returns its reply (one datagram, [`UPSTREAM_TIMEOUT`]).
async fn relay(query: &[u8], upstream: SocketAddr) -> std::io::Result<Vec<u8>> {
    let bind: SocketAddr = if upstream.is_ipv4() {
        "0.0.0.0:0".parse().map_err(std::io::Error::other)?
    } else {
        "[::]:0".parse().map_err(std::io::Error::other)?
    };
    let socket = UdpSocket::bind(bind).await?;
    socket.connect(upstream).await?;
    socket.send(query).await?;
    let mut buf = vec![0u8; MAX_MESSAGE];
    let n = tokio::time::timeout(UPSTREAM_TIMEOUT, socket.recv(&mut buf))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "upstream timed out"))??;
    buf.truncate(n);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::Query;

    use super::*;

    fn query(name: &str, rtype: RecordType) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(7)
            .set_recursion_desired(true)
            .add_query(Query::query(Name::from_ascii(name).expect("name"), rtype));
        m.to_vec().expect("encode")
    }

    fn zone() -> ClusterNames {
        let services: Vec<crate::catalog::Service> = serde_json::from_value(serde_json::json!([
            { "metadata": { "name": "web", "namespace": "shop" },
              "spec": { "clusterIP": "10.96.0.20" } }
        ]))
        .expect("services");
        ClusterNames::build(super::super::names::DEFAULT_ZONE, &services, [])
    }

    #[test]
    fn zone_questions_are_answered_and_others_are_not_ours() {
        let reply = answer(
            &zone(),
            &query("web.shop.svc.cluster.local.", RecordType::A),
        )
        .expect("answered");
        let m = Message::from_vec(&reply).expect("reply");
        assert_eq!(m.id(), 7);
        assert!(m.authoritative());
        assert_eq!(m.answers().len(), 1);
        assert_eq!(
            m.answers()[0].data(),
            &RData::A(A("10.96.0.20".parse().expect("ip")))
        );
        let nx = answer(
            &zone(),
            &query("nope.shop.svc.cluster.local.", RecordType::A),
        )
        .expect("answered");
        assert_eq!(
            Message::from_vec(&nx).expect("reply").response_code(),
            ResponseCode::NXDomain
        );
        assert!(answer(&zone(), &query("example.org.", RecordType::A)).is_none());
        assert!(answer(&zone(), b"garbage").is_none());
    }

    #[tokio::test]
    async fn tcp_questions_are_answered_one_after_another_on_a_connection() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (_tx, names) = watch::channel(Arc::new(zone()));
        let stop = CancellationToken::new();
        verge_runtime::tasks::spawn(
            "dns-tcp-test",
            serve_tcp(listener, names, None, stop.clone()),
        );
        let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
        for _ in 0..2 {
            let q = query("web.shop.svc.cluster.local.", RecordType::A);
            conn.write_u16(u16::try_from(q.len()).expect("len"))
                .await
                .expect("write");
            conn.write_all(&q).await.expect("write");
            let len = conn.read_u16().await.expect("length");
            let mut reply = vec![0u8; usize::from(len)];
            conn.read_exact(&mut reply).await.expect("reply");
            let m = Message::from_vec(&reply).expect("message");
            assert_eq!(m.answers().len(), 1);
        }
        stop.cancel();
    }
}
