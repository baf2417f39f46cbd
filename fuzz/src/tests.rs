//! The seed corpora in `fuzz/seeds/<target>/`: every seed runs through its target's check
//! without a finding and reaches the accepting path it was made for. `write_seeds` (ignored;
//! `cargo xtask fuzz --write-seeds`) writes them again from [`crate::seeds`].

use std::path::{Path, PathBuf};

use prost::Message as _;
use verge_core::Envelope;
use verge_pki::{CertInfo, CsrRequest};
use verge_proto::hub::{EdgeFrame, edge_frame};
use verge_proto::{Inventory, Message};

fn seeds_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("seeds")
        .join(target)
}

/// Every committed seed of `target`, by file name.
fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(seeds_dir(target))
        .expect("seed directory")
        .map(|entry| {
            let path = entry.expect("entry").path();
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read(&path).expect("seed"))
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no seeds for {target}");
    out
}

#[test]
#[ignore = "writes fuzz/seeds; run by hand to make the seed corpora again"]
fn write_seeds() {
    for (target, seeds) in crate::seeds::all() {
        let dir = seeds_dir(target);
        std::fs::create_dir_all(&dir).expect("mkdir");
        for (name, bytes) in seeds {
            std::fs::write(dir.join(name), bytes).expect("write seed");
        }
    }
}

#[test]
fn message_seeds_read_as_envelopes() {
    for (name, bytes) in seeds("message_decode") {
        crate::message::check(&bytes);
        let read = if name.starts_with("message-") {
            Message::decode(bytes.as_slice()).ok()
        } else if name.starts_with("edge-message") {
            EdgeFrame::decode(bytes.as_slice())
                .ok()
                .and_then(|f| match f.frame {
                    Some(edge_frame::Frame::Message(m)) => Some(m),
                    _ => None,
                })
        } else {
            continue;
        };
        let read = read.expect(&name);
        Envelope::try_from(read).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn path_seeds_pass() {
    for (_, bytes) in seeds("resource_path") {
        crate::path::check(&bytes);
    }
}

#[test]
fn inventory_seed_holds_managed_objects() {
    for (_, bytes) in seeds("inventory") {
        crate::inventory::check(&bytes);
        let inventory = Inventory::decode(bytes.as_slice()).expect("inventory");
        let held = verge_edgecontroller::desired::held_from_inventory("edge-1", &inventory);
        assert_eq!(
            held.len(),
            5,
            "pod, configmap, secret, own node, a site peer's node"
        );
    }
}

#[test]
fn config_seeds_are_accepted() {
    for (name, bytes) in seeds("config_yaml") {
        crate::config::check(&bytes);
        let text = String::from_utf8(bytes).expect("utf-8");
        let ok = match name.as_str() {
            "edgecore.yaml" => verge_edgecore::Config::from_yaml(&text, &name).is_ok(),
            "cloudhub.yaml" => verge_cloudhub::Config::from_yaml(&text, &name).is_ok(),
            _ => verge_edgecontroller::Config::from_yaml(&text, &name).is_ok(),
        };
        assert!(ok, "{name} is refused");
    }
}

#[test]
fn pki_seeds_are_accepted() {
    let seeds = seeds("csr");
    for (_, bytes) in &seeds {
        crate::pki::check(bytes);
    }
    let get = |name: &str| {
        seeds
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.clone())
            .expect(name)
    };
    let pem = String::from_utf8(get("node-csr.pem")).expect("utf-8");
    assert_eq!(CsrRequest::parse(&pem).expect("csr").node_name(), "edge-1");
    assert!(CsrRequest::parse_der(&get("node-csr.der")).is_ok());
    assert!(CertInfo::parse(&get("node-cert.pem")).is_ok());
    assert_eq!(
        verge_pki::node_identity(&get("node-cert.der"))
            .ok()
            .as_deref(),
        Some("edge-1")
    );
    assert!(CertInfo::parse(&get("ca-cert.pem")).expect("ca").is_ca);
}

#[test]
fn device_seeds_are_checked_devices() {
    for (name, bytes) in seeds("device_json") {
        crate::device::check(&bytes);
        let value: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        let device: verge_device_api::Device =
            serde_json::from_value(value["device"].clone()).expect("a Device");
        let model: Option<verge_device_api::DeviceModel> =
            serde_json::from_value(value["model"].clone()).ok();
        let checked = verge_device_api::check_device(&device, model.as_ref());
        assert_eq!(checked.is_ok(), model.is_some(), "{name}: {checked:?}");
    }
}

#[test]
fn edgeapp_seeds_render_every_target() {
    for (name, bytes) in seeds("edgeapp_json") {
        crate::edgeapp::check(&bytes);
        let spec: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        let app = serde_json::json!({
            "apiVersion": "apps.kubeedge.io/v1alpha1", "kind": "EdgeApplication",
            "metadata": {"name": "app", "namespace": "fuzz", "uid": "uid-1"}, "spec": spec,
        });
        let app = serde_json::from_value(app).expect("an EdgeApplication");
        let (desired, problems) = verge_fleetcontroller::edgeapp::render::render(&app);
        // Three Deployments (two groups, one label target), a Service and a ConfigMap.
        assert_eq!((desired.len(), problems.len()), (5, 0), "{name}: {problems:?}");
    }
}

#[test]
fn operations_seeds_are_valid_jobs() {
    use verge_fleetcontroller::operations::validate;
    for (name, bytes) in seeds("operations_json") {
        crate::operations::check(&bytes);
        let ok = match name.as_str() {
            "upgrade.json" => serde_json::from_slice(&bytes)
                .map(|s| validate::upgrade(&s).map(|_| ())),
            "prepull.json" => serde_json::from_slice(&bytes)
                .map(|s| validate::prepull(&s).map(|_| ())),
            _ => serde_json::from_slice(&bytes).map(|s| validate::config_update(&s).map(|_| ())),
        };
        assert!(matches!(ok, Ok(Ok(()))), "{name}: {ok:?}");
    }
}

#[test]
fn mqtt_seeds_are_accepted_requests() {
    for (name, bytes) in seeds("mqtt_payload") {
        crate::mqtt::check(&bytes);
        let text = String::from_utf8(bytes).expect("utf-8");
        let (topic, payload) = text.split_once('\n').expect("topic and payload");
        assert!(
            verge_edgecore::eventbus::topic::Request::parse(topic).is_some(),
            "{name}: topic"
        );
        if name == "twin-update" {
            let update =
                verge_edgecore::eventbus::twin_update(payload.as_bytes()).expect("decodes");
            verge_edgecore::eventbus::check_twin_update(&update).expect("valid");
        }
    }
}

#[test]
fn relay_seeds_pass_the_relay_with_localhost_as_authority() {
    for (name, bytes) in seeds("dmi_relay") {
        crate::relay::check(&bytes);
        let mut rewriter = verge_runtime::unix_grpc::Rewriter::default();
        rewriter.feed(crate::relay::PREFACE).expect("preface");
        let out = rewriter.feed(&bytes[1..]).expect("forwarded");
        // The first forwarded HEADERS frame (after any SETTINGS) carries `localhost`.
        let mut at = 0;
        let mut decoder = loona_hpack::Decoder::new();
        let mut authorities = Vec::new();
        while at + 9 <= out.len() {
            let len = usize::from(out[at]) << 16
                | usize::from(out[at + 1]) << 8
                | usize::from(out[at + 2]);
            if out[at + 3] == 0x1 {
                let headers = decoder.decode(&out[at + 9..at + 9 + len]).expect("decodes");
                authorities.extend(
                    headers
                        .into_iter()
                        .filter(|(n, _)| n == b":authority")
                        .map(|(_, v)| v),
                );
            }
            at += 9 + len;
        }
        assert!(!authorities.is_empty(), "{name}: no header block forwarded");
        assert!(
            authorities.iter().all(|a| a == b"localhost"),
            "{name}: {authorities:?}"
        );
    }
}

#[test]
fn spdy_seeds_decode_to_kubectl_exec_streams() {
    use tokio_util::codec::Decoder as _;
    use verge_edgecore::streaming::spdy::{Frame, SpdyCodec};
    for (name, bytes) in seeds("spdy_frames") {
        crate::spdy::check(&bytes);
        let mut codec = SpdyCodec::default();
        let mut buf = bytes::BytesMut::from(&bytes[1..]);
        let mut types = Vec::new();
        while let Some(frame) = codec.decode(&mut buf).expect("decodes") {
            if let Frame::SynStream { headers, .. } = &frame {
                types.push(headers.get("streamtype").expect("stream type").to_owned());
            }
        }
        assert_eq!(types, ["error", "stdin"], "{name}");
    }
}

#[test]
fn websocket_seeds_decode_to_channel_messages() {
    use tungstenite::protocol::{Message, Role, WebSocket};
    struct Wire(std::io::Cursor<Vec<u8>>);
    impl std::io::Read for Wire {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(buf)
        }
    }
    impl std::io::Write for Wire {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    for (name, bytes) in seeds("websocket_frames") {
        crate::websocket::check(&bytes);
        let protocol = if bytes[0] & 1 == 0 {
            "v5.channel.k8s.io"
        } else {
            "base64.channel.k8s.io"
        };
        let wire = Wire(std::io::Cursor::new(bytes[1..].to_vec()));
        let mut socket = WebSocket::from_raw_socket(wire, Role::Server, None);
        let mut channels = Vec::new();
        while let Ok(message) = socket.read() {
            let raw = match message {
                Message::Binary(data) => data,
                Message::Text(text) => bytes::Bytes::copy_from_slice(text.as_str().as_bytes()),
                _ => continue,
            };
            let decoded =
                verge_edgecore::streaming::remotecommand::websocket::decode_client_message(
                    Some(protocol),
                    raw,
                );
            channels.push(decoded.expect("decodes").0);
        }
        assert_eq!(channels, [0, 4], "{name}");
    }
}
