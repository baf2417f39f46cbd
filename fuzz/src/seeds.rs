//! The seed inputs of every target (test builds only): small valid examples of what each
//! target reads, so that the fuzzer starts past the parsers. `cargo xtask fuzz --write-seeds`
//! writes them to `fuzz/seeds/<target>/` (the CSR and certificates with fresh keys).

use std::time::Duration;

use prost::Message as _;
use verge_pki::{Ca, CsrRequest, NodeKey};
use verge_proto::hub::{
    CloudFrame, ControllerFrame, ControllerHello, EdgeFrame, EdgeHello, HubFrame, NodeSession,
    Routed, cloud_frame, controller_frame, edge_frame, hub_frame,
};
use verge_proto::{Header, Inventory, InventoryEntry, Message, Route, TraceContext};

fn message(operation: &str, resource: &str, parent: &str, content: &[u8]) -> Message {
    Message {
        header: Some(Header {
            id: "0b8e2f54-7d1c-4c36-9a55-3c1f0e6f8a01".to_owned(),
            parent_id: parent.to_owned(),
            timestamp_ms: 1_760_000_000_000,
            resource_version: "1042".to_owned(),
            sync: operation == "query",
            uid: "6f1c2b9e-5a7d-4e21-8c3b-9d0a4f7e2b10".to_owned(),
        }),
        route: Some(Route {
            source: "edged".to_owned(),
            group: "resource".to_owned(),
            operation: operation.to_owned(),
            resource: resource.to_owned(),
        }),
        content: content.to_vec(),
        trace_context: None,
    }
}

fn entry(kind: &str, namespace: &str, name: &str, rv: &str) -> InventoryEntry {
    InventoryEntry {
        r#type: kind.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        resource_version: rv.to_owned(),
    }
}

pub fn inventory() -> Inventory {
    Inventory {
        entries: vec![
            entry("pod", "default", "web-0", "1001"),
            entry("configmap", "default", "web-config", "990"),
            entry("secret", "default", "web-tls", "991"),
            entry("node", "_", "edge-1", "1200"),
            entry("node", "_", "edge-2", "1201"),
            entry("podstatus", "default", "web-0", "1002"),
            entry("twin", "default", "sensor", "7"),
        ],
    }
}

fn message_seeds() -> Seeds {
    let pod =
        br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"default"}}"#;
    let mut query = message("query", "default/configmap/web-config", "", b"");
    query.trace_context = Some(TraceContext {
        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned(),
        tracestate: "verge=1".to_owned(),
    });
    let routed = Routed {
        node: "edge-1".to_owned(),
        message: Some(message("update", "node/edge-1/default/pod/web-0", "", pod)),
    };
    vec![
        (
            "message-update",
            message("update", "default/podstatus/web-0", "", b"{}").encode_to_vec(),
        ),
        (
            "message-ack",
            message("ack", "", "1f7a", b"").encode_to_vec(),
        ),
        (
            "message-error",
            message("error", "default/pod/web-0", "1f7a", b"no such pod").encode_to_vec(),
        ),
        (
            "message-keepalive",
            message("keepalive", "", "", b"").encode_to_vec(),
        ),
        ("message-query", query.encode_to_vec()),
        (
            "message-delete-node",
            message("delete", "node/edge-1/default/secret/web-tls", "", b"").encode_to_vec(),
        ),
        (
            "edge-hello",
            EdgeFrame {
                frame: Some(edge_frame::Frame::Hello(EdgeHello {
                    node_name: "edge-1".to_owned(),
                    token: String::new(),
                    inventory: Some(inventory()),
                    edgecore_version: "0.1.0".to_owned(),
                })),
            }
            .encode_to_vec(),
        ),
        (
            "edge-message",
            EdgeFrame {
                frame: Some(edge_frame::Frame::Message(message(
                    "insert",
                    "_/node/edge-1",
                    "",
                    b"{}",
                ))),
            }
            .encode_to_vec(),
        ),
        (
            "controller-hello",
            ControllerFrame {
                frame: Some(controller_frame::Frame::Hello(ControllerHello {
                    name: "edgecontroller".to_owned(),
                    groups: vec!["resource".to_owned(), "device".to_owned()],
                })),
            }
            .encode_to_vec(),
        ),
        (
            "controller-routed",
            ControllerFrame {
                frame: Some(controller_frame::Frame::Message(routed.clone())),
            }
            .encode_to_vec(),
        ),
        (
            "cloud-message",
            CloudFrame {
                frame: Some(cloud_frame::Frame::Message(message(
                    "update",
                    "default/pod/web-0",
                    "",
                    pod,
                ))),
            }
            .encode_to_vec(),
        ),
        (
            "hub-session",
            HubFrame {
                frame: Some(hub_frame::Frame::Session(NodeSession {
                    node: "edge-1".to_owned(),
                    connected: true,
                    inventory: Some(inventory()),
                    cloudhub: "cloudhub-0".to_owned(),
                })),
            }
            .encode_to_vec(),
        ),
        (
            "hub-routed",
            HubFrame {
                frame: Some(hub_frame::Frame::Message(routed)),
            }
            .encode_to_vec(),
        ),
    ]
}

fn path_seeds() -> Seeds {
    [
        ("update-edge", "update\nedge-1\ndefault/pod/web-0"),
        ("ack-no-resource", "ack\nedge-1\n"),
        (
            "delete-cloud",
            "delete\nedge-1\nnode/edge-1/default/configmap/web-config",
        ),
        ("resync-own-node", "resync\nedge-1\n_/node/edge-1"),
        (
            "lease",
            "patch\nedge.zone-1.example\nkube-node-lease/lease/edge.zone-1.example",
        ),
        (
            "cloud-path",
            "node/edge-1/default/serviceaccounttoken/default",
        ),
        ("versions", "1043\n1042"),
        ("names", "edgecontroller\ndevicetwin\nhub\ndevicemodel"),
    ]
    .into_iter()
    .map(|(name, text)| (name, text.as_bytes().to_vec()))
    .collect()
}

fn config_seeds() -> Seeds {
    let edgecore = verge_edgecore::Config {
        node_name: "edge-1".to_owned(),
        ..verge_edgecore::Config::default()
    };
    let edgecore = edgecore.to_yaml().expect("yaml");
    let cloudhub = "edgeAddr: 0.0.0.0:10000\ncontrollerAddr: 0.0.0.0:10001\njoinAddr: 0.0.0.0:10002\n\
                    replicaName: cloudhub-0\nkeepaliveInterval: 15s\nmaxFrameBytes: 4194304\n\
                    sessionQueueLen: 1024\nmaxInflight: 64\nackTimeout: 30s\nmaxRetries: 5\n\
                    controllerQueueLen: 1024\nupstreamWait: 2s\nmaxSessions: 100\n\
                    maxInventoryEntries: 1000\nnodeMessageRate: 50\nnodeMessageBurst: 100\n\
                    shutdownGrace: 10s\nlogFormat: json\nhealthAddr: 0.0.0.0:10005\n\
                    trust: {namespace: verge-system, caName: verge-ca, serverSans: [cloudhub, 10.0.0.1],\n\
                    \x20 serverCertValidity: 720h, nodeCertValidity: 8760h, maxHandshakes: 64}\n";
    let edgecontroller = "name: edgecontroller\ncloudhub: [https://cloudhub-0:10001, https://cloudhub-1:10001]\n\
                          cloudhubService: verge-system/cloudhub-controllers\ncloudhubPort: controllerhub\n\
                          healthAddr: 0.0.0.0:10006\nconnectTimeout: 5s\n\
                          leaderElection: {leaderElect: true, leaseName: edgecontroller, leaseNamespace: verge-system,\n\
                          \x20 leaseDuration: 15s, renewDeadline: 10s, retryPeriod: 2s, identity: edgecontroller-0}\n\
                          keepaliveInterval: 20s\nreconnectMinBackoff: 1s\nreconnectMaxBackoff: 30s\n\
                          outboundQueue: 1024\nnodeQueue: 256\nshutdownGrace: 10s\n\
                          cloudhubAuth: {caConfigMap: verge-system/verge-ca, audience: verge-controllerhub,\n\
                          \x20 serviceAccount: verge-system/edgecontroller, tlsServerName: cloudhub}\n";
    vec![
        ("edgecore.yaml", edgecore.into_bytes()),
        ("cloudhub.yaml", cloudhub.as_bytes().to_vec()),
        ("edgecontroller.yaml", edgecontroller.as_bytes().to_vec()),
    ]
}

fn pki_seeds() -> Seeds {
    let ca = Ca::generate("verge-seed-ca", Duration::from_secs(10 * 365 * 86_400)).expect("CA");
    let key = NodeKey::generate().expect("key");
    let csr_pem = key.csr_pem("edge-1").expect("csr");
    let csr = CsrRequest::parse(&csr_pem).expect("own CSR");
    let cert_pem = ca
        .sign_client_csr(&csr, Duration::from_secs(10 * 365 * 86_400))
        .expect("signed");
    let cert_der = verge_pki::pem_io::cert_from_pem(&cert_pem).expect("der");
    let hash = ca.cert_hash().expect("hash");
    let secret = "token-id=abcdef\ntoken-secret=0123456789abcdef\nexpiration=2099-01-01T00:00:00Z\n\
                  usage-bootstrap-authentication=true\nusage-bootstrap-signing=true\n\
                  auth-extra-groups=system:bootstrappers:verge:edge\n";
    vec![
        ("node-csr.pem", csr_pem.into_bytes()),
        ("node-csr.der", csr.der().to_vec()),
        ("node-cert.pem", cert_pem.into_bytes()),
        ("node-cert.der", cert_der.to_vec()),
        ("ca-cert.pem", ca.cert_pem().as_bytes().to_vec()),
        ("token", b"abcdef.0123456789abcdef".to_vec()),
        ("ca-hash", hash.into_bytes()),
        ("token-secret", secret.as_bytes().to_vec()),
    ]
}

fn device_seeds() -> Seeds {
    let model = r#"{"apiVersion":"devices.kubeedge.io/v1beta1","kind":"DeviceModel",
        "metadata":{"name":"thermo","namespace":"default"},
        "spec":{"protocol":"virtual","protocolConfigData":{"baud":9600},
          "properties":[{"name":"temperature","type":"INT","accessMode":"ReadOnly","minimum":"-20",
            "maximum":"60","unit":"Celsius","visitors":{"protocolName":"virtual","configData":{"register":3}}},
          {"name":"setpoint","type":"INT","accessMode":"ReadWrite"}]}}"#;
    let device = r#"{"apiVersion":"devices.kubeedge.io/v1beta1","kind":"Device",
        "metadata":{"name":"t1","namespace":"default","uid":"u1","resourceVersion":"7"},
        "spec":{"deviceModelRef":{"name":"thermo"},"nodeName":"edge-1",
          "protocol":{"protocolName":"virtual","configData":{"deviceID":"t-1","slow":true,"scale":0.5}},
          "properties":[{"name":"temperature","reportCycle":1000,"collectCycle":1000,"reportToCloud":true,
              "pushMethod":{"mqtt":{"address":"tcp://127.0.0.1:1883","topic":"t","qos":1}}},
            {"name":"setpoint","desired":{"value":"21"},"reportToCloud":true,
              "visitors":{"protocolName":"virtual","configData":{"dataType":"int"}}}],
          "methods":[{"name":"Set","propertyNames":["setpoint"]}],
          "stateReport":{"reportCycle":5000,"reportToCloud":true}}}"#;
    let both = format!(r#"{{"device":{device},"model":{model}}}"#);
    let no_model = format!(r#"{{"device":{device}}}"#);
    vec![
        ("device-and-model.json", both.into_bytes()),
        ("device-without-model.json", no_model.into_bytes()),
    ]
}

fn edgeapp_seeds() -> Seeds {
    let spec = r#"{"workloadTemplate":{"manifests":[
        {"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},
         "spec":{"replicas":1,"selector":{"matchLabels":{"app":"web"}},
          "template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[
            {"name":"web","image":"registry.example:5000/shop/web:1.0","args":["-v"],
             "env":[{"name":"A","value":"1"}]}]}}}},
        {"apiVersion":"v1","kind":"Service","metadata":{"name":"web"},
         "spec":{"selector":{"app":"web"},"ports":[{"port":80}]}},
        {"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings"},"data":{"k":"v"}}]},
      "workloadScope":{"targetNodeGroups":[
        {"name":"north","overriders":{"replicas":2,
          "imageOverriders":[{"component":"Tag","operator":"replace","value":"2.0"},
            {"component":"Registry","operator":"remove",
             "predicate":{"path":"/spec/template/spec/containers/0/image"}}],
          "envOverriders":[{"containerName":"web","operator":"add","value":[{"name":"B","value":"2"}]}],
          "commandOverriders":[{"containerName":"web","operator":"add","value":["serve"]}],
          "argsOverriders":[{"containerName":"web","operator":"remove","value":["-v"]}],
          "resourcesOverriders":[{"containerName":"web","value":{"limits":{"cpu":"500m"}}}]}},
        {"name":"south"}],
       "targetNodeLabels":[{"labelSelector":{"matchLabels":{"site":"lab"}},"overriders":{"replicas":1}}]}}"#;
    vec![("two-groups-and-labels.json", spec.as_bytes().to_vec())]
}

fn operations_seeds() -> Seeds {
    let upgrade = r#"{"version":"v1.16.0","image":"127.0.0.1:5000/verge/edgecore",
      "imageDigestGatter":{"amd64":"sha256:0738039541234567890123456789012345678901234567890123456789012345"},
      "labelSelector":{"matchLabels":{"node-role.kubernetes.io/edge":""}},
      "concurrency":2,"timeoutSeconds":180,"failureTolerate":"0.3","checkItems":["cpu","mem","disk"],
      "requireConfirmation":true}"#;
    let prepull = r#"{"imagePrePullTemplate":{"images":["busybox:1.36","registry.local:5000/app@sha256:0738039541234567890123456789012345678901234567890123456789012345"],
      "nodeNames":["edge-1","edge-2"],"imageSecrets":"default/registry-creds","retryTimes":2,
      "concurrency":1,"timeoutSeconds":120}}"#;
    let config = r#"{"nodeNames":["edge-1"],"updateFields":{"edged.maxPods":"60","edgeHub.heartbeat":"15s"},
      "failureTolerate":"0"}"#;
    vec![
        ("upgrade.json", upgrade.as_bytes().to_vec()),
        ("prepull.json", prepull.as_bytes().to_vec()),
        ("config-update.json", config.as_bytes().to_vec()),
    ]
}

fn mqtt_seeds() -> Seeds {
    let update = "$hw/events/device/default/t1/twin/update
{\"event_id\":\"e1\",\"timestamp\":1,                  \"twin\":{\"temperature\":{\"actual\":{\"value\":\"30\"},\"metadata\":{\"type\":\"int\"}}}}";
    let state = "$hw/events/device/default/t1/state/update
{\"event_id\":\"e2\",\"timestamp\":2,\"state\":\"online\"}";
    let get = "$hw/events/device/default/t1/twin/get
{\"event_id\":\"e3\",\"timestamp\":3}";
    vec![
        ("twin-update", update.as_bytes().to_vec()),
        ("state-update", state.as_bytes().to_vec()),
        ("twin-get", get.as_bytes().to_vec()),
    ]
}

/// An HTTP/2 frame: 24-bit length, type, flags, stream id, payload.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("small").to_be_bytes();
    let mut out = len[1..].to_vec();
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// What a grpc-go mapper sends after the preface: SETTINGS, then a `MapperRegister` call
/// whose `:authority` is the socket path (percent-encoded), split over HEADERS and
/// CONTINUATION, then its DATA; and the same call again, its headers now indexed.
fn relay_seeds() -> Seeds {
    let mut encoder = loona_hpack::Encoder::new();
    let mut call = |authority: &[u8]| {
        encoder.encode([
            (&b":method"[..], &b"POST"[..]),
            (b":scheme", b"http"),
            (b":path", b"/v1beta1.DeviceManagerService/MapperRegister"),
            (b":authority", authority),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
        ])
    };
    let first = call(b"%2Fetc%2Fkubeedge%2Fdmi.sock");
    let again = call(b"%2Fetc%2Fkubeedge%2Fdmi.sock");
    let (head, tail) = first.split_at(first.len() / 2);
    let data = b"\0\0\0\0\x05\x0a\x03abc";
    let mut register = vec![0u8]; // cut at 0: the whole connection in one read
    register.extend(h2_frame(0x4, 0, 0, &[]));
    register.extend(h2_frame(0x1, 0, 1, head));
    register.extend(h2_frame(0x9, 0x4, 1, tail));
    register.extend(h2_frame(0x0, 0x1, 1, data));
    register.extend(h2_frame(0x1, 0x4, 3, &again));
    register.extend(h2_frame(0x0, 0x1, 3, data));
    let mut padded = vec![20u8]; // cut inside the first frame
    let mut payload = vec![4u8];
    payload.extend_from_slice(&first);
    payload.extend_from_slice(&[0; 4]);
    padded.extend(h2_frame(0x1, 0x8 | 0x4, 1, &payload));
    vec![("register", register), ("padded", padded)]
}

/// What kubectl exec sends on an upgraded SPDY connection: the SYN_STREAMs of its error and
/// stdin streams (zlib header blocks with SPDY's dictionary, the second reusing the first's
/// compression state), a DATA frame on stdin, a PING; once cut inside a frame.
fn spdy_seeds() -> Seeds {
    use tokio_util::codec::Encoder as _;
    use verge_edgecore::streaming::spdy::{Frame, Headers, SpdyCodec};
    let mut codec = SpdyCodec::default();
    let mut out = bytes::BytesMut::new();
    for (id, kind) in [(1, "error"), (3, "stdin")] {
        let headers = Headers(vec![
            ("streamtype".to_owned(), kind.to_owned()),
            ("requestid".to_owned(), "0".to_owned()),
        ]);
        let frame = Frame::SynStream {
            stream_id: id,
            associated_id: 0,
            priority: 0,
            flags: 0,
            headers,
        };
        codec.encode(frame, &mut out).expect("encodes");
    }
    let data = Frame::Data {
        stream_id: 3,
        fin: true,
        data: bytes::Bytes::from_static(b"ls\n"),
    };
    codec.encode(data, &mut out).expect("encodes");
    let mut exec = vec![0u8]; // cut at 0: the whole connection in one read
    exec.extend_from_slice(&out);
    exec.extend_from_slice(&[0x80, 0x03, 0x00, 0x06, 0x00, 0x00, 0x00, 0x04, 0, 0, 0, 1]);
    let mut cut = vec![12u8]; // cut inside the first SYN_STREAM
    cut.extend_from_slice(&exec[1..]);
    vec![("exec", exec), ("cut", cut)]
}

/// A client's masked WebSocket frame: FIN, `opcode`, the mask key, the masked payload.
fn ws_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let key = [0x37, 0xfa, 0x21, 0x3d];
    let mut out = vec![0x80 | opcode];
    let len = payload.len();
    if len < 126 {
        out.push(0x80 | u8::try_from(len).expect("small"));
    } else {
        out.push(0x80 | 126);
        out.extend_from_slice(&u16::try_from(len).expect("small").to_be_bytes());
    }
    out.extend_from_slice(&key);
    out.extend(payload.iter().zip(key.iter().cycle()).map(|(b, k)| b ^ k));
    out
}

/// What kubectl exec sends over WebSocket: stdin on channel 0, then a resize on channel 4;
/// binary (`v5.channel.k8s.io`) and base64 (`base64.channel.k8s.io`).
fn websocket_seeds() -> Seeds {
    let resize = br#"{"Width":80,"Height":24}"#;
    let mut binary = vec![0u8];
    binary.extend(ws_frame(0x2, b"\0ls\n"));
    let mut channel4 = vec![4u8];
    channel4.extend_from_slice(resize);
    binary.extend(ws_frame(0x2, &channel4));
    binary.extend(ws_frame(0x8, &[0x03, 0xe8]));
    let mut base64 = vec![1u8];
    base64.extend(ws_frame(0x1, b"0bHMK"));
    base64.extend(ws_frame(0x1, b"4eyJXaWR0aCI6ODAsIkhlaWdodCI6MjR9"));
    vec![("binary", binary), ("base64", base64)]
}

/// Named seed inputs of one target.
pub type Seeds = Vec<(&'static str, Vec<u8>)>;

/// (target, seeds) of every target.
pub fn all() -> Vec<(&'static str, Seeds)> {
    vec![
        ("message_decode", message_seeds()),
        ("resource_path", path_seeds()),
        (
            "inventory",
            vec![("inventory", inventory().encode_to_vec())],
        ),
        ("config_yaml", config_seeds()),
        ("csr", pki_seeds()),
        ("device_json", device_seeds()),
        ("edgeapp_json", edgeapp_seeds()),
        ("operations_json", operations_seeds()),
        ("mqtt_payload", mqtt_seeds()),
        ("dmi_relay", relay_seeds()),
        ("spdy_frames", spdy_seeds()),
        ("websocket_frames", websocket_seeds()),
    ]
}
