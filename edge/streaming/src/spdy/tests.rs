//! Codec and session tests: frames written by Go's moby/spdystream framer (the fixture under
//! `edge/tests/fixtures/spdy-headers/`), round trips, and a session driven by a client-side
//! codec over an in-memory pipe.

use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio_util::codec::{Decoder, Encoder, Framed};

use super::*;

const GO_FRAMES: &[u8] = include_bytes!("../../../tests/fixtures/spdy-headers/frames.bin");

fn headers(pairs: &[(&str, &str)]) -> Headers {
    Headers(
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

#[test]
fn decodes_frames_written_by_go() {
    let mut codec = SpdyCodec::default();
    let mut src = BytesMut::from(GO_FRAMES);
    let mut frames = Vec::new();
    while let Some(frame) = codec.decode(&mut src).expect("decode") {
        frames.push(frame);
    }
    assert!(src.is_empty());
    let syn = |id, pairs: &[(&str, &str)]| Frame::SynStream {
        stream_id: id,
        associated_id: 0,
        priority: 0,
        flags: 0,
        headers: headers(pairs),
    };
    assert_eq!(frames.len(), 9);
    assert_eq!(frames[0], syn(1, &[("streamtype", "error")]));
    assert_eq!(frames[1], syn(3, &[("streamtype", "stdin")]));
    let Frame::SynStream { headers: h, .. } = &frames[2] else {
        panic!("not a SYN_STREAM: {:?}", frames[2]);
    };
    assert_eq!(h.get("streamType"), Some("data"));
    assert_eq!(h.get("port"), Some("8080"));
    assert_eq!(h.get("requestID"), Some("0"));
    assert_eq!(frames[3], Frame::Ping { id: 1 });
    assert_eq!(
        frames[4],
        Frame::Data {
            stream_id: 3,
            fin: false,
            data: Bytes::from_static(b"hello")
        }
    );
    assert_eq!(
        frames[5],
        Frame::Data {
            stream_id: 3,
            fin: true,
            data: Bytes::new()
        }
    );
    assert_eq!(
        frames[6],
        Frame::Headers {
            stream_id: 1,
            fin: false,
            headers: headers(&[("x-multi", "a\0b")])
        }
    );
    assert_eq!(
        frames[7],
        Frame::RstStream {
            stream_id: 5,
            status: RstStatus::Cancel
        }
    );
    assert_eq!(
        frames[8],
        Frame::GoAway {
            last_good_stream_id: 0,
            status: 0
        }
    );
}

#[test]
fn go_header_blocks_name_the_spdy3_dictionary() {
    // SYN_STREAM payload: 10 bytes of ids, priority and slot, then zlib with FDICT.
    let zlib = &GO_FRAMES[18..24];
    assert_eq!(&zlib[..2], &[0x78, 0xf9]);
    assert_eq!(
        &zlib[2..],
        &dictionary::SPDY3_DICTIONARY_ADLER32.to_be_bytes()
    );
}

#[test]
fn frames_round_trip() {
    let frames = vec![
        Frame::SynStream {
            stream_id: 1,
            associated_id: 0,
            priority: 3,
            flags: frame::FLAG_FIN,
            headers: headers(&[("streamtype", "error")]),
        },
        Frame::SynReply {
            stream_id: 1,
            fin: false,
            headers: Headers::default(),
        },
        Frame::Headers {
            stream_id: 1,
            fin: true,
            headers: headers(&[("a", "b")]),
        },
        Frame::Data {
            stream_id: 1,
            fin: true,
            data: Bytes::from(vec![9u8; 70_000]),
        },
        Frame::RstStream {
            stream_id: 3,
            status: RstStatus::ProtocolError,
        },
        Frame::Ping { id: 7 },
        Frame::GoAway {
            last_good_stream_id: 5,
            status: 2,
        },
        Frame::WindowUpdate {
            stream_id: 1,
            delta: 1000,
        },
        Frame::Settings,
    ];
    let (mut enc, mut dec) = (SpdyCodec::default(), SpdyCodec::default());
    let mut buf = BytesMut::new();
    for frame in &frames {
        enc.encode(frame.clone(), &mut buf).expect("encode");
    }
    for frame in frames {
        assert_eq!(dec.decode(&mut buf).expect("decode"), Some(frame));
    }
    assert!(buf.is_empty());
}

#[test]
fn partial_frames_wait_for_more_bytes() {
    let mut codec = SpdyCodec::default();
    let mut src = BytesMut::new();
    for (i, byte) in GO_FRAMES[..0x31].iter().enumerate() {
        src.extend_from_slice(&[*byte]);
        let frame = codec.decode(&mut src).expect("decode");
        assert_eq!(frame.is_some(), i == 0x30, "byte {i}");
    }
}

#[test]
fn oversized_frames_are_refused_clearly() {
    let mut codec = SpdyCodec::new(1024);
    let mut src = BytesMut::from(&[0u8, 0, 0, 1, 0, 0, 0x04, 0x01][..]);
    let error = codec.decode(&mut src).expect_err("too large");
    assert!(matches!(
        error,
        Error::FrameTooLarge {
            len: 1025,
            max: 1024
        }
    ));
    assert_eq!(
        error.to_string(),
        "SPDY frame of 1025 bytes exceeds the maximum of 1024 bytes"
    );
}

#[test]
fn other_versions_are_refused() {
    let mut src = BytesMut::from(&[0x80u8, 0x02, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1][..]);
    assert!(matches!(
        SpdyCodec::default().decode(&mut src),
        Err(Error::UnsupportedVersion { version: 2 })
    ));
}

/// A session on one end of a pipe, the test playing the client with a codec on the other.
fn session() -> (Session, Framed<DuplexStream, SpdyCodec>) {
    let (server, client) = tokio::io::duplex(1 << 20);
    (
        Session::new(server, SessionConfig::default()),
        Framed::new(client, SpdyCodec::default()),
    )
}

fn syn(stream_id: u32, streamtype: &str) -> Frame {
    Frame::SynStream {
        stream_id,
        associated_id: 0,
        priority: 0,
        flags: 0,
        headers: headers(&[("streamtype", streamtype)]),
    }
}

#[tokio::test]
async fn streams_are_replied_and_carry_data_both_ways() {
    let (mut session, mut client) = session();
    client.send(syn(1, "stdin")).await.expect("send");
    let incoming = session.next_stream().await.expect("stream");
    assert_eq!(incoming.headers().get("streamType"), Some("stdin"));
    let (mut reader, mut writer) = incoming.accept().split();
    assert_eq!(
        client.next().await.expect("frame").expect("decode"),
        Frame::SynReply {
            stream_id: 1,
            fin: false,
            headers: Headers::default()
        }
    );
    for data in [&b"abc"[..], b"def"] {
        client
            .send(Frame::Data {
                stream_id: 1,
                fin: false,
                data: Bytes::copy_from_slice(data),
            })
            .await
            .expect("send");
    }
    client
        .send(Frame::Data {
            stream_id: 1,
            fin: true,
            data: Bytes::new(),
        })
        .await
        .expect("send");
    let mut got = Vec::new();
    reader.read_to_end(&mut got).await.expect("read");
    assert_eq!(got, b"abcdef");

    writer.write_all(&vec![5u8; 40_000]).await.expect("write");
    writer.shutdown().await.expect("fin");
    let mut total = 0;
    loop {
        match client.next().await.expect("frame").expect("decode") {
            Frame::Data {
                stream_id: 1,
                fin,
                data,
            } => {
                assert!(data.len() <= stream::MAX_DATA_FRAME);
                total += data.len();
                if fin {
                    break;
                }
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(total, 40_000);
}

#[tokio::test]
async fn pings_are_echoed_and_bad_ids_reset() {
    let (mut session, mut client) = session();
    client.send(Frame::Ping { id: 1 }).await.expect("send");
    assert_eq!(
        client.next().await.expect("frame").expect("decode"),
        Frame::Ping { id: 1 }
    );
    client.send(syn(2, "error")).await.expect("send");
    assert_eq!(
        client.next().await.expect("frame").expect("decode"),
        Frame::RstStream {
            stream_id: 2,
            status: RstStatus::ProtocolError
        }
    );
    client.send(syn(3, "error")).await.expect("send");
    let incoming = session.next_stream().await.expect("stream");
    assert_eq!(incoming.id(), 3);
    incoming.reject(RstStatus::RefusedStream);
    assert_eq!(
        client.next().await.expect("frame").expect("decode"),
        Frame::RstStream {
            stream_id: 3,
            status: RstStatus::RefusedStream
        }
    );
}

#[tokio::test]
async fn client_reset_fails_the_stream() {
    let (mut session, mut client) = session();
    client.send(syn(1, "stdout")).await.expect("send");
    let (mut reader, mut writer) = session
        .next_stream()
        .await
        .expect("stream")
        .accept()
        .split();
    client
        .send(Frame::RstStream {
            stream_id: 1,
            status: RstStatus::Cancel,
        })
        .await
        .expect("send");
    let mut buf = [0u8; 8];
    let error = reader.read(&mut buf).await.expect_err("reset");
    assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset);
    assert!(writer.write_all(b"x").await.is_err());
}

#[tokio::test]
async fn close_sends_goaway_and_peer_close_is_seen() {
    let (mut session, mut client) = session();
    client.send(syn(1, "error")).await.expect("send");
    let stream = session.next_stream().await.expect("stream").accept();
    let (_reader, mut writer) = stream.split();
    writer.write_all(b"status").await.expect("write");
    writer.shutdown().await.expect("fin");
    let handle = session.handle();
    handle.close().await;
    let mut frames = Vec::new();
    while let Some(frame) = client.next().await {
        frames.push(frame.expect("decode"));
    }
    assert_eq!(
        frames.last(),
        Some(&Frame::GoAway {
            last_good_stream_id: 1,
            status: 0
        })
    );
    drop(client);
    tokio::time::timeout(std::time::Duration::from_secs(5), handle.closed())
        .await
        .expect("peer close seen");
}

#[tokio::test]
async fn full_stream_buffer_holds_reading_back() {
    let (server, client) = tokio::io::duplex(1 << 16);
    let config = SessionConfig {
        stream_buffer: 10,
        ..SessionConfig::default()
    };
    let mut session = Session::new(server, config);
    let mut client = Framed::new(client, SpdyCodec::default());
    client.send(syn(1, "stdin")).await.expect("send");
    let (mut reader, _writer) = session
        .next_stream()
        .await
        .expect("stream")
        .accept()
        .split();
    for _ in 0..3 {
        client
            .send(Frame::Data {
                stream_id: 1,
                fin: false,
                data: Bytes::from_static(b"0123456789"),
            })
            .await
            .expect("send");
    }
    client.send(Frame::Ping { id: 5 }).await.expect("send");
    let mut got = [0u8; 30];
    reader.read_exact(&mut got).await.expect("read");
    // The ping queued behind the blocked data is answered once the reader drained it.
    loop {
        if let Frame::Ping { id } = client.next().await.expect("frame").expect("decode") {
            assert_eq!(id, 5);
            break;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn idle_sessions_are_closed() {
    let (server, mut client) = tokio::io::duplex(1 << 16);
    let config = SessionConfig {
        idle_timeout: Some(std::time::Duration::from_secs(60)),
        ..SessionConfig::default()
    };
    let session = Session::new(server, config);
    let handle = session.handle();
    let started = tokio::time::Instant::now();
    handle.closed().await;
    assert!(started.elapsed() >= std::time::Duration::from_secs(60));
    // The server side is gone: the client reads EOF.
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest).await;
    drop(session);
}
