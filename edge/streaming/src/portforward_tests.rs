//! Port-forward header validation, pairing and the pair timeout.

use super::*;
use crate::spdy::Headers;

fn headers(pairs: &[(&str, &str)]) -> Headers {
    Headers(
        pairs
            .iter()
            .map(|(n, v)| ((*n).into(), (*v).into()))
            .collect(),
    )
}

#[test]
fn pairs_by_request_id_with_the_old_client_fallback() {
    let h = headers(&[("port", "80"), ("streamtype", "data"), ("requestid", "7")]);
    assert_eq!(
        validate(5, &h),
        Ok(Header {
            port: 80,
            data: true,
            request_id: "7".into()
        })
    );
    // No requestID: error stream 1 and data stream 3 pair as request "1".
    let error = validate(1, &headers(&[("port", "80"), ("streamtype", "error")])).expect("ok");
    let data = validate(3, &headers(&[("port", "80"), ("streamtype", "data")])).expect("ok");
    assert_eq!(error.request_id, "1");
    assert_eq!(data.request_id, "1");
}

#[test]
fn bad_headers_are_refused_with_the_kubelet_texts() {
    let check = |pairs: &[(&str, &str)], text: &str| {
        assert_eq!(
            validate(1, &headers(pairs))
                .expect_err("refused")
                .to_string(),
            text
        );
    };
    check(&[("streamtype", "data")], r#""port" header is required"#);
    check(
        &[("port", "x"), ("streamtype", "data")],
        r#"unable to parse "x" as a port"#,
    );
    check(
        &[("port", "70000"), ("streamtype", "data")],
        r#"unable to parse "70000" as a port"#,
    );
    check(
        &[("port", "0"), ("streamtype", "data")],
        r#"port "0" must be > 0"#,
    );
    check(&[("port", "80")], r#""streamType" header is required"#);
    check(
        &[("port", "80"), ("streamtype", "stdin")],
        r#"invalid stream type "stdin""#,
    );
}

#[tokio::test(start_paused = true)]
async fn an_incomplete_pair_times_out_on_its_error_stream() {
    use bytes::Bytes;
    use futures::{SinkExt, StreamExt};
    use tokio_util::codec::Framed;

    use crate::spdy::{Frame, SpdyCodec};

    let (server, client) = tokio::io::duplex(1 << 16);
    let target = Target {
        sandbox_pid: std::process::id(),
        pod: "p_ns".into(),
        uid: String::new(),
    };
    tokio::spawn(serve(server, target));
    let mut client = Framed::new(client, SpdyCodec::default());
    let error = headers(&[("port", "80"), ("streamtype", "error"), ("requestid", "0")]);
    client
        .send(Frame::SynStream {
            stream_id: 1,
            associated_id: 0,
            priority: 0,
            flags: 0,
            headers: error,
        })
        .await
        .expect("send");
    let bad = headers(&[("port", "0"), ("streamtype", "data"), ("requestid", "0")]);
    client
        .send(Frame::SynStream {
            stream_id: 3,
            associated_id: 0,
            priority: 0,
            flags: 0,
            headers: bad,
        })
        .await
        .expect("send");
    let mut frames = Vec::new();
    while frames.len() < 4 {
        frames.push(client.next().await.expect("frame").expect("decode"));
    }
    assert!(matches!(frames[0], Frame::SynReply { stream_id: 1, .. }));
    assert_eq!(
        frames[1],
        Frame::RstStream {
            stream_id: 3,
            status: RstStatus::RefusedStream
        }
    );
    assert_eq!(
        frames[2],
        Frame::Data {
            stream_id: 1,
            fin: false,
            data: Bytes::from_static(b"(request=0) timed out waiting for streams")
        }
    );
    assert_eq!(
        frames[3],
        Frame::Data {
            stream_id: 1,
            fin: true,
            data: Bytes::new()
        }
    );
}
