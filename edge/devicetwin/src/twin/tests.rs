use serde_json::json;

use super::*;

fn device() -> Device {
    serde_json::from_value(json!({
        "metadata": {"name": "thermo", "namespace": "ns", "uid": "u1"},
        "spec": {
            "deviceModelRef": {"name": "m"},
            "protocol": {"protocolName": "virtual"},
            "properties": [
                {"name": "temperature", "reportToCloud": true},
                {"name": "setpoint", "reportToCloud": true, "desired": {"value": "21"}},
                {"name": "debug", "desired": {"value": "off"}}
            ]
        }
    }))
    .expect("device")
}

fn twin(name: &str, reported: &str, observed: Option<&str>) -> Twin {
    Twin {
        property_name: name.to_owned(),
        reported: Some(TwinProperty::new(reported)),
        observed_desired: observed.map(TwinProperty::new),
    }
}

#[test]
fn reports_are_checked_before_anything_is_applied() {
    let d = device();
    assert!(check_report(&d, &[twin("temperature", "20", None)]).is_ok());
    let err = check_report(
        &d,
        &[twin("temperature", "1", None), twin("humidity", "1", None)],
    )
    .expect_err("unknown property");
    assert_eq!(
        err.to_string(),
        "device ns/thermo has no property \"humidity\""
    );
    assert!(matches!(check_report(&d, &[]), Err(Error::NoTwins { .. })));
    let big = "x".repeat(MAX_VALUE_BYTES + 1);
    assert!(matches!(
        check_report(&d, &[twin("temperature", &big, None)]),
        Err(Error::ValueTooLarge { .. })
    ));
}

#[test]
fn a_report_updates_values_stamps_them_and_computes_the_delta() {
    let d = device();
    let mut record = TwinRecord::new("u1");
    let before = view(&d, None, &record);
    assert_eq!(
        before.delta(),
        BTreeMap::from([
            ("debug".to_owned(), "off".to_owned()),
            ("setpoint".to_owned(), "21".to_owned())
        ]),
        "never reported: every desired value is a delta"
    );
    let updated = apply_report(
        &mut record,
        vec![
            twin("setpoint", "21", Some("21")),
            twin("temperature", "19", None),
        ],
        1_700,
    );
    assert_eq!(updated.len(), 2);
    let after = view(&d, None, &record);
    assert_eq!(
        after.delta(),
        BTreeMap::from([("debug".to_owned(), "off".to_owned())])
    );
    let reported = after.twins["temperature"]
        .reported
        .clone()
        .expect("reported");
    assert_eq!(reported.metadata["timestamp"], "1700");
    // A mapper's own timestamp is kept.
    let mut own = twin("temperature", "18", None);
    if let Some(r) = own.reported.as_mut() {
        r.metadata.insert("timestamp".into(), "5".into());
    }
    apply_report(&mut record, vec![own], 9_999);
    assert_eq!(
        record.twins["temperature"]
            .reported
            .as_ref()
            .map(|r| r.metadata["timestamp"].as_str()),
        Some("5")
    );
    // mapper-framework sends the key empty: it gets the receive time too.
    let mut blank = twin("temperature", "19", None);
    if let Some(r) = blank.reported.as_mut() {
        r.metadata.insert("timestamp".into(), String::new());
    }
    apply_report(&mut record, vec![blank], 9_500);
    assert_eq!(
        record.twins["temperature"]
            .reported
            .as_ref()
            .map(|r| r.metadata["timestamp"].as_str()),
        Some("9500")
    );
    let mut empty = twin("temperature", "17", None);
    empty.observed_desired = Some(TwinProperty::default());
    apply_report(&mut record, vec![empty], 10_000);
    assert_eq!(
        record.twins["temperature"].observed_desired, None,
        "an empty value is no value"
    );
}

#[test]
fn the_status_report_holds_only_report_to_cloud_properties() {
    let d = device();
    let mut record = TwinRecord::new("u1");
    assert_eq!(
        serde_json::to_value(status_report(&d, &record)).expect("json"),
        json!({"twins": []}),
        "state and lastOnlineTime are omitted when never reported"
    );
    apply_report(
        &mut record,
        vec![twin("debug", "on", None), twin("temperature", "23", None)],
        7,
    );
    let now = DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
        .expect("time")
        .to_utc();
    assert!(apply_state(
        &mut record,
        check_state("OK").expect("ok"),
        now
    ));
    assert_eq!(
        serde_json::to_value(status_report(&d, &record)).expect("json"),
        json!({
            "twins": [{"propertyName": "temperature",
                "reported": {"value": "23", "metadata": {"timestamp": "7"}}}],
            "state": "ok",
            "lastOnlineTime": "2026-01-02T03:04:05Z"
        })
    );
}

#[test]
fn states_are_checked_and_repeated_online_states_refresh_rarely() {
    assert_eq!(check_state(" Online ").expect("online"), "online");
    assert!(matches!(
        check_state("exploded"),
        Err(Error::InvalidState { .. })
    ));
    let t0 = DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
        .expect("time")
        .to_utc();
    let mut record = TwinRecord::new("u");
    assert!(apply_state(&mut record, "ok".into(), t0));
    assert!(
        !apply_state(&mut record, "ok".into(), t0 + chrono::TimeDelta::seconds(5)),
        "unchanged and fresh: nothing to write"
    );
    assert!(apply_state(
        &mut record,
        "ok".into(),
        t0 + LAST_ONLINE_REFRESH
    ));
    assert!(apply_state(&mut record, "offline".into(), t0));
    assert_eq!(record.state, "offline");
    assert_eq!(
        record.last_online_time, "2026-01-02T03:05:05Z",
        "offline keeps the last online time"
    );
}

#[test]
fn records_round_trip_and_drop_removed_properties() {
    let mut record = TwinRecord::new("u1");
    apply_report(&mut record, vec![twin("gone", "1", None)], 1);
    let json = serde_json::to_vec(&record).expect("json");
    let back: TwinRecord = serde_json::from_slice(&json).expect("parse");
    assert_eq!(back, record);
    retain_properties(&mut record, &device());
    assert!(record.twins.is_empty());
}
