//! Devices end to end (issue 11): KubeEdge-format Device and DeviceModel manifests applied with
//! kubectl to the real API server, devicecontroller, cloudhub and edgecore's devicetwin, and
//! two real mappers over DMI — Verge's Rust virtual mapper and the Go mapper generated from
//! `proto/dmi/v1beta1/api.proto` (which dials edgecore as KubeEdge's mapper-framework does) —
//! plus edge apps over a real mosquitto.
//!
//! Each test starts its own cloud services and edge node and its own namespace.

mod device_support;

use std::time::{Duration, Instant};

use device_support::{DeviceEnv, Mqtt, model_yaml};
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use verge_e2e::wait_for;

/// A model and a Device for each mapper reach that mapper; reported values reach the
/// DeviceStatus (and keep changing, each within 5 s); a new desired value reaches the
/// mapper and comes back as observedDesired; deleting a Device removes it from its mapper,
/// from the edge and from the cloud.
#[tokio::test]
async fn devices_reach_both_mappers_and_their_twins_come_back() -> anyhow::Result<()> {
    let mut env = DeviceEnv::start("dev-map", |_| {}).await?;
    env.start_rust_mapper("virtual")?;
    env.start_go_mapper("govirtual").await?;
    env.apply(&model_yaml(&env.ns))?;
    env.apply_device("thermo-rs", "virtual")?;
    env.apply_device("thermo-go", "govirtual")?;

    for device in ["thermo-rs", "thermo-go"] {
        env.wait_twin(device, "setpoint", Duration::from_secs(60), |t| {
            t.observed_desired.as_deref() == Some("21") && t.reported.as_deref() == Some("21")
        })
        .await?;
        let first = env
            .wait_twin(device, "temperature", Duration::from_secs(30), |t| {
                t.reported.is_some()
            })
            .await?;
        // The Go mapper counts up, so each report is a new value; the Rust mapper walks at
        // random (it may repeat a value): its timestamp changes with every report.
        let started = Instant::now();
        env.wait_twin(device, "temperature", Duration::from_secs(5), |t| {
            t.reported_at != first.reported_at
        })
        .await
        .map_err(|e| anyhow::anyhow!("{device}: no new report within 5 s: {e}\n{}", env.logs()))?;
        eprintln!(
            "{device}: a new reported value reached the DeviceStatus after {:?}",
            started.elapsed()
        );
    }

    for device in ["thermo-rs", "thermo-go"] {
        env.set_desired(device, "setpoint", "23").await?;
    }
    for device in ["thermo-rs", "thermo-go"] {
        env.wait_twin(device, "setpoint", Duration::from_secs(30), |t| {
            t.observed_desired.as_deref() == Some("23") && t.reported.as_deref() == Some("23")
        })
        .await?;
    }

    env.devices()
        .delete("thermo-rs", &DeleteParams::default())
        .await?;
    let socket = env.mapper_socket("virtual");
    wait_for(
        "thermo-rs removed from the Rust mapper",
        Duration::from_secs(30),
        || {
            let socket = socket.clone();
            let ns = env.ns.clone();
            async move {
                Ok(device_support::mapper_lacks(&socket, &ns, "thermo-rs")
                    .await
                    .then_some(()))
            }
        },
    )
    .await?;
    // The other device is untouched and keeps reporting.
    let before = env
        .twin("thermo-go", "temperature")
        .await?
        .and_then(|b| b.reported_at);
    env.wait_twin("thermo-go", "temperature", Duration::from_secs(10), |t| {
        t.reported_at != before
    })
    .await?;
    let held = env.edge_devices_after_stop()?;
    assert_eq!(
        held,
        vec![format!("{}/device/thermo-go", env.ns)],
        "{}",
        env.logs()
    );
    Ok(())
}

/// An edge app publishes a twin update on KubeEdge's MQTT topic: it gets the result and the
/// delta, and the reportToCloud property reaches the DeviceStatus; a malformed payload gets
/// an error result and changes nothing.
#[tokio::test]
async fn mqtt_twin_updates_answer_and_reach_the_cloud() -> anyhow::Result<()> {
    let broker = verge_testkit::mosquitto::Mosquitto::start().await?;
    let env = DeviceEnv::start("dev-mqtt", |c| {
        c.event_bus.enable = true;
        c.event_bus.mqtt_server = broker.url();
        c.event_bus.username = broker.username().to_owned();
        c.event_bus.password_file = Some(broker.password_file());
    })
    .await?;
    env.apply(&model_yaml(&env.ns))?;
    env.apply_device("thermo-mqtt", "nomapper")?;
    let mut app = Mqtt::connect(&broker, "edge-app").await?;
    let base = format!("$hw/events/device/{}/thermo-mqtt", env.ns);
    app.subscribe(&format!("{base}/twin/update/result")).await?;
    app.subscribe(&format!("{base}/twin/update/delta")).await?;
    // The edge holds the Device once devicecontroller sent it: until then the update is
    // answered 404.
    let update = json!({
        "event_id": "e2e-1",
        "timestamp": 1,
        "twin": {
            "temperature": {"actual": {"value": "30"}, "metadata": {"type": "int"}},
            "setpoint": {"actual": {"value": "19"}, "metadata": {"type": "int"}}
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        app.publish(&format!("{base}/twin/update"), &update.to_string())
            .await?;
        let result = app
            .next(
                &format!("{base}/twin/update/result"),
                Duration::from_secs(5),
            )
            .await?;
        if result.get("code").is_none() {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "twin update refused: {result}\n{}",
            env.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let delta = app
        .next(&format!("{base}/twin/update/delta"), Duration::from_secs(5))
        .await?;
    assert_eq!(
        delta["delta"]["setpoint"],
        json!("21"),
        "desired 21 vs actual 19: {delta}"
    );
    env.wait_twin("thermo-mqtt", "temperature", Duration::from_secs(15), |t| {
        t.reported.as_deref() == Some("30")
    })
    .await?;

    app.publish(&format!("{base}/twin/update"), "{not json")
        .await?;
    let error = app
        .next(
            &format!("{base}/twin/update/result"),
            Duration::from_secs(5),
        )
        .await?;
    assert_eq!(error["code"], json!(400), "{error}");
    assert!(
        !error["reason"].as_str().unwrap_or_default().is_empty(),
        "{error}"
    );
    // Nothing changed, and the bus still serves good updates.
    let again = json!({"event_id": "e2e-2", "timestamp": 2,
        "twin": {"temperature": {"actual": {"value": "31"}, "metadata": {"type": "int"}}}});
    app.publish(&format!("{base}/twin/update"), &again.to_string())
        .await?;
    let ok = app
        .next(
            &format!("{base}/twin/update/result"),
            Duration::from_secs(5),
        )
        .await?;
    assert!(ok.get("code").is_none(), "{ok}");
    env.wait_twin("thermo-mqtt", "temperature", Duration::from_secs(15), |t| {
        t.reported.as_deref() == Some("31")
    })
    .await?;
    // A new desired value set in the cloud reaches the edge app as a delta, as KubeEdge
    // publishes one when the cloud updates a twin.
    env.set_desired("thermo-mqtt", "setpoint", "25").await?;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let delta = app.next(&format!("{base}/twin/update/delta"), left).await?;
        if delta["delta"]["setpoint"] == json!("25") {
            break;
        }
    }
    Ok(())
}

/// With the link cut, the edge keeps storing what the mapper reports; after the heal the
/// DeviceStatus shows the newest value reported while offline (the mapper is stopped before
/// the heal, so that value can only come from the edge's store).
#[tokio::test]
async fn values_reported_offline_reach_the_cloud_after_heal() -> anyhow::Result<()> {
    let netns = verge_testkit::netns::EdgeNetns::create(13)?;
    let mut env = DeviceEnv::start_in("dev-off", &netns, |_| {}).await?;
    env.start_go_mapper("govirtual").await?;
    env.apply(&model_yaml(&env.ns))?;
    env.apply_device("thermo-off", "govirtual")?;
    let online = env
        .wait_twin("thermo-off", "temperature", Duration::from_secs(60), |t| {
            t.reported.is_some()
        })
        .await?;
    netns.cut()?;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let cut_view = env.twin("thermo-off", "temperature").await?;
    env.stop_mappers();
    netns.heal()?;
    let start: i64 = online.reported.as_deref().unwrap_or("0").parse()?;
    let cut: i64 = cut_view
        .and_then(|t| t.reported)
        .as_deref()
        .unwrap_or("0")
        .parse()?;
    let healed = env
        .wait_twin("thermo-off", "temperature", Duration::from_secs(30), |t| {
            t.reported
                .as_deref()
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v >= cut + 4)
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", env.logs()))?;
    eprintln!(
        "counter {start} before the cut, {cut} in the cloud while cut, {:?} after the heal",
        healed.reported
    );
    Ok(())
}

/// A Device whose model is missing, a property without visitors and nested configData each
/// get a Warning event naming the problem; a good Device on the same node keeps reporting.
#[tokio::test]
async fn bad_devices_get_clear_errors_and_affect_no_other_device() -> anyhow::Result<()> {
    let mut env = DeviceEnv::start("dev-bad", |_| {}).await?;
    env.start_rust_mapper("virtual")?;
    env.apply(&model_yaml(&env.ns))?;
    env.apply_device("good", "virtual")?;
    env.wait_twin("good", "temperature", Duration::from_secs(60), |t| {
        t.reported.is_some()
    })
    .await?;
    let ns = env.ns.clone();
    let node = env.edge.name.clone();
    env.apply(&format!(
        "apiVersion: devices.kubeedge.io/v1beta1\nkind: Device\nmetadata: {{name: no-model, namespace: {ns}}}\n\
         spec:\n  deviceModelRef: {{name: missing-model}}\n  nodeName: {node}\n  protocol: {{protocolName: virtual}}\n"
    ))?;
    env.apply(&format!(
        "apiVersion: devices.kubeedge.io/v1beta1\nkind: Device\nmetadata: {{name: no-visitor, namespace: {ns}}}\n\
         spec:\n  deviceModelRef: {{name: thermometer-model}}\n  nodeName: {node}\n  protocol: {{protocolName: virtual}}\n\
         \x20 properties:\n  - name: temperature\n    reportToCloud: true\n"
    ))?;
    env.apply(&format!(
        "apiVersion: devices.kubeedge.io/v1beta1\nkind: Device\nmetadata: {{name: nested, namespace: {ns}}}\n\
         spec:\n  deviceModelRef: {{name: thermometer-model}}\n  nodeName: {node}\n\
         \x20 protocol:\n    protocolName: virtual\n    configData: {{serial: {{port: /dev/ttyS0, baud: 9600}}}}\n"
    ))?;
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.ns);
    for (device, reason, text) in [
        ("no-model", "DeviceModelNotFound", "missing-model"),
        ("no-visitor", "InvalidDevice", "visitors"),
        ("nested", "InvalidDevice", "configData"),
    ] {
        let events = events.clone();
        let found = wait_for(
            &format!("{reason} event on {device}"),
            Duration::from_secs(30),
            || {
                let events = events.clone();
                async move {
                    let list = events
                        .list(
                            &ListParams::default().fields(&format!("involvedObject.name={device}")),
                        )
                        .await?;
                    Ok(list.items.into_iter().find(|e| {
                        e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning")
                    }))
                }
            },
        )
        .await?;
        let message = found.message.unwrap_or_default();
        assert!(message.contains(text), "{device}: {message}");
    }
    // The good device is unaffected: it keeps reporting, and the bad ones never reach the
    // mapper.
    let before = env
        .twin("good", "temperature")
        .await?
        .and_then(|b| b.reported_at);
    env.wait_twin("good", "temperature", Duration::from_secs(10), |t| {
        t.reported_at != before
    })
    .await?;
    let socket = env.mapper_socket("virtual");
    for device in ["no-model", "no-visitor", "nested"] {
        assert!(
            device_support::mapper_lacks(&socket, &env.ns, device).await,
            "{device} reached the mapper"
        );
    }
    // Fixing a Device clears the way: the missing model appears, the Device goes down.
    let patch = json!({"spec": {"deviceModelRef": {"name": "thermometer-model"},
        "properties": [{"name": "temperature", "reportToCloud": true, "reportCycle": 1000,
            "visitors": {"protocolName": "virtual", "configData": {"dataType": "int"}}}]}});
    env.devices()
        .patch("no-model", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    env.wait_twin("no-model", "temperature", Duration::from_secs(30), |t| {
        t.reported.is_some()
    })
    .await?;
    Ok(())
}
