//! Component tests of the eventbus against a real mosquitto (the test kit's, with a password)
//! and an in-memory [`TwinService`](verge_edgecore::eventbus::TwinService): an edge app built
//! on rumqttc publishes on KubeEdge's topics and reads the answers, as a KubeEdge app would.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]

mod eventbus_common;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use verge_edgecore::eventbus::MsgTwin;
use verge_edgecore::eventbus::{
    DeviceRef, DeviceState, EventBus, EventBusHandle, MemberDevice, TwinDelta, TwinDocEntry,
    TwinService, TwinValue,
};
use verge_testkit::mosquitto::Mosquitto;

use eventbus_common::{App, FakeTwins, STEP, config, update};

const BASE: &str = "$hw/events/device/default/thermo";

fn thermo() -> DeviceRef {
    DeviceRef::new("default", "thermo")
}

/// A running eventbus on `broker` serving `service`; stopped when dropped.
struct Bus {
    handle: EventBusHandle,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<verge_edgecore::eventbus::error::Result<()>>,
}

impl Bus {
    async fn start(config: &verge_edgecore::Config, service: Arc<dyn TwinService>) -> Result<Self> {
        let (bus, handle) = EventBus::new(&config.node_name, &config.event_bus, service)?;
        let bus = bus.context("eventbus enabled")?;
        let stop = CancellationToken::new();
        let task = tokio::spawn(bus.run(stop.clone()));
        Ok(Self { handle, stop, task })
    }

    async fn connected(&self) -> Result<()> {
        tokio::time::timeout(STEP, self.handle.wait_connected())
            .await
            .context("eventbus did not connect")?;
        ensure!(self.handle.is_connected(), "eventbus stopped");
        Ok(())
    }

    async fn stop(self) -> Result<()> {
        self.stop.cancel();
        tokio::time::timeout(STEP, self.task).await???;
        Ok(())
    }
}

async fn setup(devices: &[DeviceRef]) -> Result<(Mosquitto, Arc<FakeTwins>, Bus, App)> {
    verge_telemetry::init_for_tests();
    let broker = Mosquitto::start().await?;
    let fake = FakeTwins::with_devices(devices);
    let bus = Bus::start(&config(&broker), fake.clone()).await?;
    bus.connected().await?;
    let app = App::connect(&broker, &["$hw/events/device/+/+/#", "$hw/events/node/#"]).await?;
    Ok((broker, fake, bus, app))
}

#[tokio::test]
async fn update_yields_result_document_and_delta() -> Result<()> {
    let (_broker, fake, bus, mut app) = setup(&[thermo()]).await?;
    let topic = format!("{BASE}/twin/update");
    app.publish(
        &topic,
        update("e-1", "setpoint", Some("22"), Some("21"), "int"),
    )
    .await?;
    ensure!(
        app.expect(&topic).await?["event_id"] == "e-1",
        "own request echoed"
    );

    let result = app.expect(&format!("{topic}/result")).await?;
    ensure!(result["event_id"] == "e-1", "{result}");
    ensure!(
        result.get("code").is_none(),
        "success has no code: {result}"
    );
    let twin = &result["twin"]["setpoint"];
    ensure!(
        twin["expected"]["value"] == "22" && twin["actual"]["value"] == "21",
        "{result}"
    );
    ensure!(
        twin["actual"]["metadata"]["timestamp"].is_i64(),
        "stamped: {result}"
    );

    let doc = app.expect(&format!("{topic}/document")).await?;
    ensure!(
        doc["event_id"] == "e-1" && doc["timestamp"] == result["timestamp"],
        "{doc}"
    );
    ensure!(doc["twin"]["setpoint"]["last"] == Value::Null, "{doc}");
    ensure!(
        doc["twin"]["setpoint"]["current"]["actual"]["value"] == "21",
        "{doc}"
    );

    let delta = app.expect(&format!("{topic}/delta")).await?;
    ensure!(delta["delta"] == json!({"setpoint": "22"}), "{delta}");
    ensure!(
        delta["twin"]["setpoint"]["expected"]["value"] == "22",
        "{delta}"
    );
    ensure!(
        delta["event_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty() && id != "e-1"),
        "{delta}"
    );

    let stored = fake.twins(&thermo()).context("device")?;
    ensure!(
        stored["setpoint"]
            .actual
            .as_ref()
            .and_then(|a| a.value.as_deref())
            == Some("21")
    );

    // Reaching the expected value: result and document, no delta.
    app.publish(&topic, update("e-2", "setpoint", None, Some("22"), "int"))
        .await?;
    app.expect(&topic).await?;
    app.expect(&format!("{topic}/result")).await?;
    let doc = app.expect(&format!("{topic}/document")).await?;
    ensure!(
        doc["twin"]["setpoint"]["last"]["actual"]["value"] == "21",
        "{doc}"
    );
    app.expect_silence(Duration::from_millis(300)).await?;
    bus.stop().await
}

#[tokio::test]
async fn get_returns_every_twin() -> Result<()> {
    let (_broker, fake, bus, mut app) = setup(&[thermo()]).await?;
    fake.update(
        thermo(),
        verge_edgecore::eventbus::TwinUpdate {
            event_id: String::new(),
            twins: [(
                "temp".to_owned(),
                Some(MsgTwin {
                    actual: Some(TwinValue::new("23")),
                    ..MsgTwin::default()
                }),
            )]
            .into(),
        },
    )
    .await?;
    let topic = format!("{BASE}/twin/get");
    app.publish(&topic, r#"{"event_id":"g-1","timestamp":0}"#)
        .await?;
    app.expect(&topic).await?;
    let result = app.expect(&format!("{topic}/result")).await?;
    ensure!(result["event_id"] == "g-1", "{result}");
    ensure!(
        result["twin"]["temp"]["actual"]["value"] == "23",
        "{result}"
    );
    bus.stop().await
}

#[tokio::test]
async fn malformed_requests_get_error_results_and_change_nothing() -> Result<()> {
    let (_broker, fake, bus, mut app) = setup(&[thermo()]).await?;
    let update_topic = format!("{BASE}/twin/update");
    let result_topic = format!("{update_topic}/result");
    for (payload, code, reason) in [
        (&b"{not json"[..], 400, "not a valid twin update"),
        (
            br#"{"event_id":"w","twin":{"t":{"actual":{"value":23}}}}"#,
            400,
            "invalid type",
        ),
        (
            br#"{"event_id":"w","twin":{"t":[]}}"#,
            400,
            "must be a JSON object",
        ),
        (br#"{"event_id":"m"}"#, 400, "no \"twin\""),
        (
            br#"{"event_id":"k","twin":{"a b":{}}}"#,
            400,
            "invalid property name",
        ),
        (
            &update("v", "setpoint", Some("x"), None, "int")[..],
            400,
            "not an integer",
        ),
    ] {
        app.publish(&update_topic, payload).await?;
        app.expect(&update_topic).await?;
        let result = app.expect(&result_topic).await?;
        ensure!(result["code"] == code, "{result}");
        ensure!(
            result["reason"]
                .as_str()
                .is_some_and(|r| r.contains(reason)),
            "reason should mention {reason:?}: {result}"
        );
        ensure!(result.get("twin").is_none(), "{result}");
    }
    ensure!(
        fake.twins(&thermo()) == Some(Default::default()),
        "nothing stored"
    );

    // Unknown device: 404 on that device's topic, event id echoed.
    let ghost = "$hw/events/device/default/ghost/twin/update";
    app.publish(ghost, update("g", "t", None, Some("1"), "string"))
        .await?;
    app.expect(ghost).await?;
    let result = app.expect(&format!("{ghost}/result")).await?;
    ensure!(
        result["code"] == 404 && result["event_id"] == "g",
        "{result}"
    );
    ensure!(
        result["reason"]
            .as_str()
            .is_some_and(|r| r.contains("default/ghost")),
        "{result}"
    );

    let get = format!("{BASE}/twin/get");
    app.publish(&get, "[1]").await?;
    app.expect(&get).await?;
    ensure!(app.expect(&format!("{get}/result")).await?["code"] == 400);

    let state = format!("{BASE}/state/update");
    app.publish(&state, r#"{"event_id":"s","state":"busy"}"#)
        .await?;
    app.expect(&state).await?;
    let result = app.expect(&format!("{state}/result")).await?;
    ensure!(
        result["code"] == 400 && result["event_id"] == "s",
        "{result}"
    );

    // The bus still serves good requests.
    app.publish(
        &update_topic,
        update("ok", "setpoint", None, Some("5"), "int"),
    )
    .await?;
    app.expect(&update_topic).await?;
    let result = app.expect(&result_topic).await?;
    ensure!(
        result["event_id"] == "ok" && result.get("code").is_none(),
        "{result}"
    );
    bus.stop().await
}

#[tokio::test]
async fn state_update_and_membership() -> Result<()> {
    let (_broker, fake, bus, mut app) = setup(&[thermo()]).await?;
    let topic = format!("{BASE}/state/update");
    app.publish(
        &topic,
        r#"{"event_id":"s-1","timestamp":0,"state":"ONLINE"}"#,
    )
    .await?;
    app.expect(&topic).await?;
    let result = app.expect(&format!("{topic}/result")).await?;
    ensure!(result["event_id"] == "s-1", "{result}");
    ensure!(
        result["device"]
            == json!({"name":"thermo","state":"online","last_online":"2026-11-24 05:30:00"}),
        "{result}"
    );
    let stored = fake.devices.lock().expect("lock")[&thermo()].state;
    ensure!(stored == Some(DeviceState::Online));

    // membership/get is answered on edgecore's own node name.
    let get = "$hw/events/node/other-node/membership/get";
    app.publish(get, r#"{"event_id":"m-1","timestamp":0}"#)
        .await?;
    app.expect(get).await?;
    let result = app
        .expect("$hw/events/node/edge-test/membership/get/result")
        .await?;
    ensure!(result["event_id"] == "m-1", "{result}");
    ensure!(
        result["devices"] == json!([{"id":"default/thermo","name":"thermo","state":"online"}]),
        "{result}"
    );
    bus.stop().await
}

#[tokio::test]
async fn handle_publishes_devicetwin_news() -> Result<()> {
    let (_broker, _fake, bus, mut app) = setup(&[thermo()]).await?;
    let twin = MsgTwin {
        expected: Some(TwinValue::new("on")),
        ..MsgTwin::default()
    };
    let delta = TwinDelta::of(&[("switch".to_owned(), twin.clone())].into()).context("delta")?;
    bus.handle.publish_delta(&thermo(), &delta)?;
    let body = app.expect(&format!("{BASE}/twin/update/delta")).await?;
    ensure!(body["delta"] == json!({"switch": "on"}), "{body}");

    let doc = [(
        "switch".to_owned(),
        TwinDocEntry {
            last: None,
            current: Some(twin),
        },
    )]
    .into();
    bus.handle.publish_document(&thermo(), "d-1", &doc)?;
    let body = app.expect(&format!("{BASE}/twin/update/document")).await?;
    ensure!(body["event_id"] == "d-1", "{body}");

    bus.handle
        .publish_state(&thermo(), DeviceState::Offline, None)?;
    let body = app.expect(&format!("{BASE}/state/update/result")).await?;
    ensure!(
        body["device"] == json!({"name":"thermo","state":"offline"}),
        "{body}"
    );

    let added = MemberDevice {
        id: "default/thermo".into(),
        name: "thermo".into(),
        ..Default::default()
    };
    bus.handle.publish_membership_update(&[added], &[])?;
    let body = app
        .expect("$hw/events/node/edge-test/membership/updated")
        .await?;
    ensure!(body["added_devices"][0]["id"] == "default/thermo", "{body}");
    ensure!(body["removed_devices"] == json!([]), "{body}");

    let handle = bus.handle.clone();
    bus.stop().await?;
    ensure!(matches!(
        handle.publish_delta(&thermo(), &delta),
        Err(verge_edgecore::eventbus::Error::Stopped)
    ));
    Ok(())
}

#[tokio::test]
async fn broker_outages_never_stop_the_bus() -> Result<()> {
    verge_telemetry::init_for_tests();
    let mut broker = Mosquitto::start().await?;
    broker.stop()?;
    let fake = FakeTwins::with_devices(&[thermo()]);
    let bus = Bus::start(&config(&broker), fake.clone()).await?;
    // Down at start: the bus keeps trying.
    tokio::time::sleep(Duration::from_millis(800)).await;
    ensure!(!bus.task.is_finished() && !bus.handle.is_connected());
    broker.restart().await?;
    bus.connected().await?;

    // Down while connected: reconnects and subscribes again.
    broker.stop()?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(!bus.task.is_finished());
    broker.restart().await?;
    bus.connected().await?;
    let mut app = App::connect(&broker, &[&format!("{BASE}/twin/get/result")]).await?;
    app.publish(&format!("{BASE}/twin/get"), r#"{"event_id":"after"}"#)
        .await?;
    ensure!(app.expect(&format!("{BASE}/twin/get/result")).await?["event_id"] == "after");
    bus.stop().await
}

#[tokio::test]
async fn the_broker_refuses_wrong_or_missing_credentials() -> Result<()> {
    verge_telemetry::init_for_tests();
    let broker = Mosquitto::start().await?;
    let dir = tempfile::tempdir()?;
    let wrong = dir.path().join("password");
    std::fs::write(&wrong, "not-the-password\n")?;
    let mut config = config(&broker);
    config.event_bus.password_file = Some(wrong);
    let bus = Bus::start(&config, FakeTwins::with_devices(&[])).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    ensure!(!bus.handle.is_connected() && !bus.task.is_finished());
    ensure!(
        broker.log().contains("not authorised") || broker.log().contains("not authorized"),
        "broker log:\n{}",
        broker.log()
    );
    bus.stop().await?;

    // An anonymous client is refused too.
    let options = rumqttc::MqttOptions::new("anon", "127.0.0.1", broker.port());
    let (_client, mut eventloop) = rumqttc::AsyncClient::new(options, 4);
    let refused = tokio::time::timeout(STEP, eventloop.poll()).await?;
    ensure!(
        matches!(refused, Err(rumqttc::ConnectionError::ConnectionRefused(_))),
        "{refused:?}"
    );
    Ok(())
}
