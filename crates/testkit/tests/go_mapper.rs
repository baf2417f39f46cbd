//! The Go mapper generated from Verge's DMI `.proto` builds, registers with (a stand-in for)
//! edgecore over a unix socket dialled as a plain path, as KubeEdge's mapper-framework
//! dials, reports its device, and takes downstream calls on its own socket.

use std::time::Duration;

use verge_proto::dmi::v1beta1::{
    GetDeviceRequest, MapperRegisterResponse, RemoveDeviceRequest, ReportDeviceStatusRequest,
    UpdateDeviceRequest,
};
use verge_testkit::dmi::{self, DmiCall, FakeEdgecore};
use verge_testkit::process::ChildProcess;

const WAIT: Duration = Duration::from_secs(10);

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_mapper_registers_reports_and_takes_updates() -> anyhow::Result<()> {
    let binary = tokio::task::spawn_blocking(verge_testkit::go_mapper::ensure_built).await??;
    let dir = tempfile::tempdir()?;
    let dmi_socket = dir.path().join("dmi.sock");
    let socket = dir.path().join("go-virtual.sock");
    let answer = MapperRegisterResponse {
        model_list: vec![dmi::thermometer_model("default")],
        device_list: vec![dmi::thermometer_device(
            "default", "thermo", "virtual", "21", 200,
        )],
    };
    let mut edgecore = FakeEdgecore::start(&dmi_socket, answer)?;
    let mut mapper = ChildProcess::spawn(
        &binary,
        [
            "-socket".as_ref(),
            socket.as_os_str(),
            "-dmi-socket".as_ref(),
            dmi_socket.as_os_str(),
            "-debug".as_ref(),
        ],
        std::iter::empty::<(&str, &str)>(),
    )?;

    let register = edgecore
        .wait_for("MapperRegister", WAIT, |c| match c {
            DmiCall::Register(r) => Some(r.clone()),
            _ => None,
        })
        .await
        .map_err(|e| e.context(mapper.log_tail(20)))?;
    assert!(register.with_data);
    let info = register.mapper.unwrap_or_default();
    assert_eq!(info.protocol, "virtual");
    assert_eq!(info.address, socket.as_os_str().as_encoded_bytes());
    assert_eq!(info.state, "OK");

    let (reported, observed) = edgecore
        .wait_for("setpoint report", WAIT, |c| twin(c, "thermo", "setpoint"))
        .await?;
    assert_eq!((reported.as_str(), observed.as_str()), ("21", "21"));
    edgecore
        .wait_for("online state", WAIT, |c| match c {
            DmiCall::States(s) if s.device_name == "thermo" && s.state == "online" => Some(()),
            _ => None,
        })
        .await?;

    // edgecore's side of the downstream calls: the mapper serves only after registering.
    let mut client = dmi::mapper_client(&socket);
    let updated = dmi::thermometer_device("default", "thermo", "virtual", "23", 200);
    client
        .update_device(UpdateDeviceRequest {
            device: Some(updated),
        })
        .await?;
    edgecore
        .wait_for("the new desired value reported", WAIT, |c| {
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
    let twins = got.device.and_then(|d| d.status).map(|s| s.twins);
    assert_eq!(twins.map(|t| t.len()), Some(2));

    client
        .remove_device(RemoveDeviceRequest {
            device_name: "thermo".into(),
            device_namespace: "default".into(),
        })
        .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    edgecore.drain();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let after: Vec<DmiCall> = edgecore.drain();
    assert!(after.is_empty(), "reports after RemoveDevice: {after:?}");

    mapper.terminate(WAIT).await?;
    assert!(!socket.exists(), "the mapper removes its socket on exit");
    Ok(())
}
