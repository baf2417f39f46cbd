//! Device twins are traced in the real Jaeger (`verge_testkit::jaeger`) like pods: a value a
//! mapper reports is one trace from edgecore's devicetwin through cloudhub to
//! devicecontroller's DeviceStatus write; a Device created in the cloud is one trace from
//! devicecontroller's watch event to edgecore's DMI call that gives it to its mapper.

mod device_support;

use std::time::Duration;

use device_support::{DeviceEnv, model_yaml};
use verge_e2e::wait_for;
use verge_telemetry::TracingConfig;
use verge_testkit::jaeger::{Jaeger, Trace, TraceQuery};

/// The names of `span_id`'s ancestors in `trace`, nearest first, ending at the root.
fn ancestors<'a>(trace: &'a Trace, span_id: &str) -> Vec<&'a str> {
    let mut names = Vec::new();
    let mut next = trace.span(span_id).and_then(|s| s.parent_span_id.clone());
    while let Some(id) = next {
        let Some(parent) = trace.span(&id) else {
            break;
        };
        names.push(parent.operation_name.as_str());
        next = parent.parent_span_id.clone();
    }
    names
}

/// The chain of the first span named `span` in `trace`: its name and its ancestors' names,
/// nearest first (empty when `trace` has no such span).
fn chain<'a>(trace: &'a Trace, span: &'a str) -> Vec<&'a str> {
    trace.spans_named(span).next().map_or_else(Vec::new, |s| {
        let mut names = vec![s.operation_name.as_str()];
        names.extend(ancestors(trace, &s.span_id));
        names
    })
}

/// The first trace of `query` (whole, as Jaeger returns it) where the chain of the span
/// named `span` ends at `root`, once Jaeger has every process's part of it (they export in
/// their own batches).
async fn find(
    jaeger: &Jaeger,
    query: &TraceQuery,
    span: &str,
    root: &str,
    what: &str,
) -> anyhow::Result<Trace> {
    wait_for(what, Duration::from_secs(90), || async {
        for found in jaeger.find_traces(query).await? {
            let Some(trace) = jaeger.trace(&found.trace_id).await? else {
                continue;
            };
            if chain(&trace, span).last() == Some(&root) {
                return Ok(Some(trace));
            }
        }
        Ok(None)
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_twin_report_is_one_trace_from_devicetwin_to_the_device_status() -> anyhow::Result<()> {
    let jaeger = verge_testkit::jaeger::shared().await?;
    let otlp = jaeger.otlp_grpc_endpoint();
    let mut env = DeviceEnv::start_traced("dev-trace", &otlp, |c| {
        c.tracing = TracingConfig::to_endpoint(otlp.clone());
    })
    .await?;
    env.start_rust_mapper("virtual")?;
    env.apply(&model_yaml(&env.ns))?;
    env.apply_device("thermo", "virtual")?;
    env.wait_twin("thermo", "temperature", Duration::from_secs(60), |t| {
        t.reported.is_some()
    })
    .await?;

    // Up: the mapper's value → devicetwin.report → edgehub.send → cloudhub.upstream →
    // devicecontroller.upstream → kube.apply_device_status.
    let query = TraceQuery::service("edgecore")
        .operation("devicetwin.report")
        .tag("k8s.namespace.name", &env.ns)
        .tag("verge.device.name", "thermo");
    let report = find(
        &jaeger,
        &query,
        "kube.apply_device_status",
        "devicetwin.report",
        "the trace of a twin report",
    )
    .await?;
    let services = report.services();
    for service in ["edgecore", "cloudhub", "devicecontroller"] {
        assert!(services.contains(&service), "{service} in {services:?}");
    }
    let roots: Vec<&str> = report.roots().map(|s| s.operation_name.as_str()).collect();
    assert_eq!(roots, vec!["devicetwin.report"], "one root, the report");
    let write = report
        .spans_named("kube.apply_device_status")
        .next()
        .expect("the DeviceStatus write");
    assert_eq!(
        ancestors(&report, &write.span_id),
        vec![
            "devicecontroller.upstream",
            "cloudhub.upstream",
            "edgehub.send",
            "devicetwin.report",
        ],
        "{}",
        jaeger.trace_url(&report.trace_id)
    );

    // Down: the Device's watch event in devicecontroller → … → metamanager.apply →
    // devicetwin.desired → dmi.register_device.
    let query = TraceQuery::service("edgecore")
        .operation("dmi.register_device")
        .tag("k8s.namespace.name", &env.ns)
        .tag("verge.device.name", "thermo");
    let desired = find(
        &jaeger,
        &query,
        "dmi.register_device",
        "controller.watch_event",
        "the trace of the Device's creation",
    )
    .await?;
    let call = desired
        .spans_named("dmi.register_device")
        .next()
        .expect("the DMI call");
    let chain = ancestors(&desired, &call.span_id);
    assert_eq!(
        chain.first().copied(),
        Some("devicetwin.desired"),
        "{chain:?}"
    );
    assert!(chain.contains(&"metamanager.apply"), "{chain:?}");
    assert_eq!(
        chain.last().copied(),
        Some("controller.watch_event"),
        "{chain:?}"
    );
    assert!(desired.services().contains(&"devicecontroller"));
    eprintln!(
        "twin report trace {} ({} spans): {}",
        report.trace_id,
        report.spans.len(),
        jaeger.trace_url(&report.trace_id)
    );
    Ok(())
}
