//! Unit tests of status report classification.

use serde_json::json;
use verge_core::{Group, Operation};
use verge_proto::{Message, MessageExt};

use super::*;

/// As the hub link reads a message, then [`super::parse`].
fn parse(node: &str, message: &Message) -> Result<Inbound> {
    super::parse(node, &Envelope::try_from(message.clone())?)
}

fn report(resource: &str, uid: &str, content: &[u8]) -> Message {
    Message::build(
        "m-1",
        "devicetwin",
        Group::Device,
        Operation::Update,
        resource,
        content.to_vec(),
    )
    .with_object(uid, "")
}

fn body() -> Vec<u8> {
    json!({
        "twins": [{ "propertyName": "temp",
            "reported": { "value": "23", "metadata": { "timestamp": "1", "type": "int" } },
            "observedDesired": { "value": "20" } }],
        "state": "online",
        "lastOnlineTime": "2026-01-01T00:00:00Z"
    })
    .to_string()
    .into_bytes()
}

#[test]
fn a_status_report_parses() {
    let m = report("node/edge-1/ns/devicestatus/t", "u-1", &body());
    let Ok(Inbound::Status(r)) = parse("edge-1", &m) else {
        panic!("expected a report");
    };
    assert_eq!(
        (r.namespace.as_str(), r.name.as_str(), r.uid.as_str()),
        ("ns", "t", "u-1")
    );
    assert_eq!(r.report.twins[0].property_name, "temp");
    assert_eq!(
        r.report.twins[0]
            .observed_desired
            .as_ref()
            .map(|p| p.value.as_str()),
        Some("20")
    );
    assert_eq!(r.report.state, "online");
}

#[test]
fn bad_reports_are_errors() {
    let other_node = report("node/edge-2/ns/devicestatus/t", "u-1", &body());
    assert!(matches!(
        parse("edge-1", &other_node),
        Err(Error::Forbidden { .. })
    ));
    let cluster = report("node/edge-1/_/devicestatus/t", "u-1", &body());
    assert!(matches!(
        parse("edge-1", &cluster),
        Err(Error::Forbidden { .. })
    ));
    let no_uid = report("node/edge-1/ns/devicestatus/t", "", &body());
    assert!(matches!(parse("edge-1", &no_uid), Err(Error::NoUid(_))));
    let bad_json = report("node/edge-1/ns/devicestatus/t", "u-1", b"{\"twins\": 3}");
    let e = parse("edge-1", &bad_json).expect_err("bad json");
    assert!(
        e.reason().contains("device status report"),
        "{}",
        e.reason()
    );
    let edge_side = report("ns/devicestatus/t", "u-1", &body());
    assert!(matches!(parse("edge-1", &edge_side), Err(Error::Route(_))));
    let wrong_type = report("node/edge-1/ns/device/t", "u-1", &body());
    assert!(matches!(
        parse("edge-1", &wrong_type),
        Err(Error::Unsupported { .. })
    ));
    let mut wrong_group = report("node/edge-1/ns/devicestatus/t", "u-1", &body());
    if let Some(route) = wrong_group.route.as_mut() {
        route.group = "resource".into();
    }
    assert!(matches!(
        parse("edge-1", &wrong_group),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn answers_are_classified_and_errors_answered_in_group_device() {
    let ack = Message::reply(
        "a-1",
        "d-1",
        "metamanager",
        Group::Device,
        Operation::Ack,
        "node/edge-1/ns/device/t",
        Vec::new(),
    );
    assert!(matches!(
        parse("edge-1", &ack),
        Ok(Inbound::Answer { operation: Operation::Ack, ref parent_id }) if parent_id == "d-1"
    ));
    let m = Envelope::try_from(report("node/edge-1/ns/devicestatus/t", "u-1", &body()))
        .expect("envelope");
    let a = Message::from(answer(&m, Outcome::Error("no".into())));
    assert_eq!(a.group(), Ok(Group::Device));
    assert_eq!(a.parent_id(), "m-1");
    assert_eq!(a.operation(), Ok(Operation::Error));
    assert_eq!(
        a.route.as_ref().map(|r| r.source.as_str()),
        Some("devicecontroller")
    );
}
