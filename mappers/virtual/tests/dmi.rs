//! The virtual mapper against a stand-in edgecore (`verge_testkit::dmi::FakeEdgecore`, a
//! real tonic DeviceManagerService) over temporary unix sockets: it registers with
//! `withData`, reports the devices it was given, takes every DeviceMapperService call, and
//! retries registration until edgecore is up.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use verge_proto::dmi::v1beta1::{
    CreateDeviceModelRequest, GetDeviceRequest, MapperRegisterResponse, RegisterDeviceRequest,
    RemoveDeviceModelRequest, RemoveDeviceRequest, ReportDeviceStatusRequest, UpdateDeviceRequest,
};
use verge_testkit::dmi::{self, DmiCall, FakeEdgecore};
use verge_virtual_mapper::Config;

const WAIT: Duration = Duration::from_secs(10);

fn config(dir: &Path) -> Config {
    Config {
        socket: dir.join("virtual.sock"),
        dmi_socket: dir.join("dmi.sock"),
        ..Config::default()
    }
}

/// `(reported, observedDesired)` of `property` in a status report of `device`.
fn twin(call: &DmiCall, device: &str, property: &str) -> Option<(String, String)> {
    let DmiCall::Status(ReportDeviceStatusRequest {
        device_name,
        reported_device: Some(status),
        ..
    }) = call
    else {
        return None;
    };
    let twin = status
        .twins
        .iter()
        .find(|t| device_name == device && t.property_name == property)?;
    Some((
        twin.reported.clone().unwrap_or_default().value,
        twin.observed_desired.clone().unwrap_or_default().value,
    ))
}

#[tokio::test]
async fn registers_reports_and_serves_every_call() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let dir = tempfile::tempdir()?;
    let config = config(dir.path());
    let answer = MapperRegisterResponse {
        model_list: vec![dmi::thermometer_model("default")],
        device_list: vec![dmi::thermometer_device(
            "default", "thermo", "virtual", "21", 100,
        )],
    };
    let mut edgecore = FakeEdgecore::start(&config.dmi_socket, answer)?;
    let shutdown = CancellationToken::new();
    let mapper = tokio::spawn(verge_virtual_mapper::run(config.clone(), shutdown.clone()));

    let register = edgecore
        .wait_for("MapperRegister", WAIT, |c| match c {
            DmiCall::Register(r) => Some(r.clone()),
            _ => None,
        })
        .await?;
    assert!(register.with_data);
    let info = register.mapper.unwrap_or_default();
    assert_eq!(
        (info.name.as_str(), info.protocol.as_str()),
        ("virtual-mapper", "virtual")
    );
    assert_eq!(info.api_version, "v1beta1");
    assert_eq!(info.address, config.socket.as_os_str().as_encoded_bytes());

    // The read-only temperature walks in the visitor's 18..26; the writable setpoint holds
    // its desired value.
    let (temperature, observed) = edgecore
        .wait_for("temperature", WAIT, |c| twin(c, "thermo", "temperature"))
        .await?;
    assert!(
        temperature
            .parse::<i64>()
            .is_ok_and(|t| (18..=26).contains(&t)),
        "{temperature}"
    );
    assert_eq!(observed, "");
    let setpoint = edgecore
        .wait_for("setpoint", WAIT, |c| twin(c, "thermo", "setpoint"))
        .await?;
    assert_eq!(setpoint, ("21".to_owned(), "21".to_owned()));
    edgecore
        .wait_for("online", WAIT, |c| match c {
            DmiCall::States(s) if s.device_name == "thermo" && s.state == "online" => Some(()),
            _ => None,
        })
        .await?;

    let mut client = dmi::mapper_client(&config.socket);
    // A new desired value is applied at once and comes back as reported and observedDesired.
    let updated = dmi::thermometer_device("default", "thermo", "virtual", "23", 100);
    client
        .update_device(UpdateDeviceRequest {
            device: Some(updated),
        })
        .await?;
    edgecore
        .wait_for("setpoint 23", Duration::from_secs(2), |c| {
            twin(c, "thermo", "setpoint").filter(|t| t.0 == "23" && t.1 == "23")
        })
        .await?;
    let got = client
        .get_device(GetDeviceRequest {
            device_name: "thermo".into(),
            device_namespace: "default".into(),
        })
        .await?
        .into_inner();
    let twins = got
        .device
        .and_then(|d| d.status)
        .map(|s| s.twins)
        .unwrap_or_default();
    assert_eq!(twins.len(), 2);

    // A model in another namespace, then a device using it.
    let created = client
        .create_device_model(CreateDeviceModelRequest {
            model: Some(dmi::thermometer_model("plant")),
        })
        .await?
        .into_inner();
    assert_eq!(created.device_model_name, "thermometer-model");
    let registered = client
        .register_device(RegisterDeviceRequest {
            device: Some(dmi::thermometer_device(
                "plant", "boiler", "virtual", "30", 100,
            )),
        })
        .await?
        .into_inner();
    assert_eq!(
        (
            registered.device_name.as_str(),
            registered.device_namespace.as_str()
        ),
        ("boiler", "plant")
    );
    let boiler = edgecore
        .wait_for("boiler setpoint", WAIT, |c| twin(c, "boiler", "setpoint"))
        .await?;
    assert_eq!(boiler, ("30".to_owned(), "30".to_owned()));

    // Removing a device stops its reports; the other device goes on.
    client
        .remove_device(RemoveDeviceRequest {
            device_name: "thermo".into(),
            device_namespace: "default".into(),
        })
        .await?;
    client
        .remove_device_model(RemoveDeviceModelRequest {
            model_name: "thermometer-model".into(),
            model_namespace: "default".into(),
        })
        .await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    edgecore.drain();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = edgecore.drain();
    assert!(
        after
            .iter()
            .all(|c| twin(c, "thermo", "setpoint").is_none())
    );
    assert!(
        after
            .iter()
            .any(|c| twin(c, "boiler", "setpoint").is_some())
    );
    let missing = client
        .get_device(GetDeviceRequest {
            device_name: "thermo".into(),
            device_namespace: "default".into(),
        })
        .await;
    assert_eq!(missing.err().map(|s| s.code()), Some(tonic::Code::NotFound));

    shutdown.cancel();
    tokio::time::timeout(WAIT, mapper).await???;
    assert!(!config.socket.exists(), "the socket is removed at shutdown");
    Ok(())
}

#[tokio::test]
async fn retries_registration_until_edgecore_is_up() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let dir = tempfile::tempdir()?;
    let config = config(dir.path());
    let shutdown = CancellationToken::new();
    let mapper = tokio::spawn(verge_virtual_mapper::run(config.clone(), shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!mapper.is_finished());

    let answer = MapperRegisterResponse {
        model_list: vec![dmi::thermometer_model("default")],
        device_list: vec![dmi::thermometer_device(
            "default", "late", "virtual", "", 100,
        )],
    };
    let mut edgecore = FakeEdgecore::start(&config.dmi_socket, answer)?;
    edgecore
        .wait_for("MapperRegister", WAIT, |c| {
            matches!(c, DmiCall::Register(_)).then_some(())
        })
        .await?;
    let (setpoint, observed) = edgecore
        .wait_for("late setpoint", WAIT, |c| twin(c, "late", "setpoint"))
        .await?;
    assert!(
        setpoint.parse::<i64>().is_ok_and(|v| (5..=35).contains(&v)),
        "{setpoint}"
    );
    assert_eq!(observed, "");

    shutdown.cancel();
    tokio::time::timeout(WAIT, mapper).await???;
    Ok(())
}

#[tokio::test]
async fn stops_while_edgecore_is_down() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let shutdown = CancellationToken::new();
    let mapper = tokio::spawn(verge_virtual_mapper::run(
        config(dir.path()),
        shutdown.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    shutdown.cancel();
    tokio::time::timeout(WAIT, mapper).await???;
    Ok(())
}
