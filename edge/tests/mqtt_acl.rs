//! Issue 31: twin and app-group topics are usable only by the clients edgecore's
//! configuration names. `edgecore mqtt-acl` (here its library function) turns `eventBus` into
//! mosquitto's `acl_file`; a real mosquitto enforces it: a mapper may publish only to its own
//! devices' twin topics, an app only to its group's topics, and a client the configuration
//! does not name reaches nothing. Without the file (the broker as before), every publish
//! below reaches the watcher.

use std::time::Duration;

use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use tokio::sync::mpsc;
use verge_edgecore::eventbus::acl::mosquitto_acl;
use verge_edgecore::eventbus::{EventBusConfig, MqttClient};
use verge_testkit::mosquitto::{MOSQUITTO_USER, Mosquitto};

/// A connected client of `broker` as `user`, and the topics of the messages it receives.
async fn client(broker: &Mosquitto, user: &str) -> (AsyncClient, mpsc::UnboundedReceiver<String>) {
    let mut options = MqttOptions::new(format!("acl-test-{user}"), "127.0.0.1", broker.port());
    options.set_credentials(user, broker.password());
    let (client, mut eventloop) = AsyncClient::new(options, 16);
    let (tx, rx) = mpsc::unbounded_channel();
    #[allow(clippy::disallowed_methods)] // the event loop ends with the test
    tokio::spawn(async move {
        while let Ok(event) = eventloop.poll().await {
            if let Event::Incoming(Packet::Publish(p)) = event {
                let _ = tx.send(p.topic);
            }
        }
    });
    (client, rx)
}

/// Every topic `rx` receives within `wait`.
async fn received(rx: &mut mpsc::UnboundedReceiver<String>, wait: Duration) -> Vec<String> {
    let mut topics = Vec::new();
    while let Ok(Some(topic)) = tokio::time::timeout(wait, rx.recv()).await {
        topics.push(topic);
    }
    topics.sort();
    topics
}

#[tokio::test]
async fn the_generated_acl_keeps_each_client_to_its_topics() -> anyhow::Result<()> {
    let config = EventBusConfig {
        username: MOSQUITTO_USER.to_owned(),
        clients: vec![
            MqttClient {
                username: "mapper".into(),
                devices: vec!["default/pump".into()],
                groups: vec![],
            },
            MqttClient {
                username: "app".into(),
                devices: vec![],
                groups: vec!["robots".into()],
            },
        ],
        ..EventBusConfig::default()
    };
    let acl = mosquitto_acl(&config, "edge-1").map_err(anyhow::Error::msg)?;
    let broker = Mosquitto::start_with_acl(&["mapper", "app", "stranger"], Some(&acl)).await?;

    // edgecore's user watches every device and app topic.
    let (watcher, mut seen) = client(&broker, MOSQUITTO_USER).await;
    watcher
        .subscribe("$hw/events/device/#", QoS::AtLeastOnce)
        .await?;
    watcher.subscribe("verge/apps/#", QoS::AtLeastOnce).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (mapper, _) = client(&broker, "mapper").await;
    let (app, mut app_seen) = client(&broker, "app").await;
    let (stranger, _) = client(&broker, "stranger").await;
    app.subscribe("verge/apps/#", QoS::AtLeastOnce).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let publish = |c: &AsyncClient, topic: &'static str| {
        let c = c.clone();
        async move { c.publish(topic, QoS::AtLeastOnce, false, "{}").await }
    };
    publish(&mapper, "$hw/events/device/default/pump/twin/update").await?;
    publish(&mapper, "$hw/events/device/default/valve/twin/update").await?;
    publish(&app, "verge/apps/robots/default/task/a/reply").await?;
    publish(&app, "verge/apps/cameras/default/task/a/reply").await?;
    publish(&stranger, "$hw/events/device/default/pump/twin/update").await?;
    publish(&stranger, "verge/apps/robots/default/task/b/reply").await?;
    // edgecore answers on the app's group, and on another group the app must not read.
    publish(&watcher, "verge/apps/robots/default/task/a").await?;
    publish(&watcher, "verge/apps/cameras/default/task/a").await?;

    let topics = received(&mut seen, Duration::from_secs(2)).await;
    assert_eq!(
        topics,
        vec![
            "$hw/events/device/default/pump/twin/update".to_owned(),
            "verge/apps/cameras/default/task/a".to_owned(),
            "verge/apps/robots/default/task/a".to_owned(),
            "verge/apps/robots/default/task/a/reply".to_owned(),
        ],
        "only the named clients' own topics get through"
    );
    let app_topics = received(&mut app_seen, Duration::from_secs(1)).await;
    assert!(
        app_topics
            .iter()
            .all(|t| t.starts_with("verge/apps/robots/")),
        "the app read another group's messages: {app_topics:?}"
    );
    assert!(
        app_topics.contains(&"verge/apps/robots/default/task/a".to_owned()),
        "{app_topics:?}"
    );
    Ok(())
}
