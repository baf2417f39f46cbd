use serde_json::json;

use super::*;
use crate::objects::fake::FakeObjects;

fn pod(containers: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": "web", "namespace": "ns", "uid": "u-1",
            "labels": { "app": "web", "tier": "a\"b" }, "annotations": { "note": "x" } },
        "spec": { "serviceAccountName": "sa", "containers": containers },
        "status": { "hostIP": "10.0.0.1" },
    }))
    .expect("pod")
}

fn objects() -> FakeObjects {
    let o = FakeObjects::default();
    o.put_config_map(json!({"metadata": {"name": "cfg", "namespace": "ns"},
        "data": {"A": "from-cm", "B": "b", "bad=key": "skipped"}}));
    o.put_secret(json!({"metadata": {"name": "sec", "namespace": "ns"},
        "data": {"PASS": "c2VjcmV0"}, "stringData": {"IGNORED": "x"}}));
    o
}

async fn env(container: serde_json::Value) -> Result<Vec<String>> {
    let p = pod(json!([container]));
    let c = &p.spec.as_ref().expect("spec").containers[0];
    resolve_env(
        &p,
        c,
        &objects(),
        Some("172.17.0.5"),
        Some("192.0.2.7"),
        "edge-1",
    )
    .await
}

#[tokio::test]
async fn env_from_first_then_env_later_wins_with_expansion() {
    let got = env(json!({"name": "c",
        "envFrom": [{"configMapRef": {"name": "cfg"}},
                    {"secretRef": {"name": "sec"}, "prefix": "S_"},
                    {"configMapRef": {"name": "absent", "optional": true}}],
        "env": [{"name": "A", "value": "over-$(B)"},
                {"name": "X", "value": "$(A)/$(NOPE)/$$(A)/$$/$x/$("},
                {"name": "E", "value": ""}]}))
    .await
    .expect("env");
    assert_eq!(
        got,
        [
            "A=over-b",
            "B=b",
            "S_PASS=secret",
            "X=over-b/$(NOPE)/$(A)/$/$x/$(",
            "E="
        ]
    );
}

#[tokio::test]
async fn field_and_resource_refs() {
    let field = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
    let got = env(json!({"name": "c",
        "resources": {"limits": {"cpu": "1500m", "memory": "64Mi"}},
        "env": [field("N", "metadata.name"), field("NS", "metadata.namespace"),
                field("U", "metadata.uid"), field("L", "metadata.labels['app']"),
                field("AN", "metadata.annotations['note']"), field("NN", "spec.nodeName"),
                field("SA", "spec.serviceAccountName"), field("IP", "status.podIP"),
                field("H", "status.hostIP"), field("LS", "metadata.labels"),
                {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                {"name": "CPUM", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}},
                {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                {"name": "REQ", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory"}}}]}))
    .await
    .expect("env");
    assert_eq!(
        got,
        [
            "N=web",
            "NS=ns",
            "U=u-1",
            "L=web",
            "AN=x",
            "NN=edge-1",
            "SA=sa",
            "IP=172.17.0.5",
            "H=192.0.2.7",
            "LS=app=\"web\"\ntier=\"a\\\"b\"",
            "CPU=2",
            "CPUM=1500",
            "MEM=64",
            "REQ=67108864"
        ]
    );
}

#[tokio::test]
async fn key_refs_optional_and_kubelet_errors() {
    let got = env(json!({"name": "c", "env": [
        {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "A"}}},
        {"name": "P", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "PASS"}}},
        {"name": "O1", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "no", "optional": true}}},
        {"name": "O2", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": true}}}]}))
    .await
    .expect("env");
    assert_eq!(got, ["K=from-cm", "P=secret"]);

    let cases = [
        (
            json!({"envFrom": [{"configMapRef": {"name": "x"}}]}),
            "configmap \"x\" not found",
        ),
        (
            json!({"envFrom": [{"secretRef": {"name": "x"}}]}),
            "secret \"x\" not found",
        ),
        (
            json!({"env": [{"name": "V", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]}),
            "couldn't find key k in ConfigMap ns/cfg",
        ),
        (
            json!({"env": [{"name": "V", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "k"}}}]}),
            "couldn't find key k in Secret ns/sec",
        ),
        (
            json!({"env": [{"name": "V", "valueFrom": {"configMapKeyRef": {"name": "y", "key": "k"}}}]}),
            "configmap \"y\" not found",
        ),
        (
            json!({"env": [{"name": "V", "valueFrom": {"fieldRef": {"fieldPath": "spec.nope"}}}]}),
            "unsupported fieldPath: spec.nope",
        ),
    ];
    for (mut c, want) in cases {
        c["name"] = json!("c");
        let err = env(c).await.expect_err(want);
        assert!(matches!(err, Error::ContainerConfig(_)), "{err}");
        assert_eq!(err.to_string(), want);
    }
}

#[test]
fn env_var_names() {
    assert!(is_env_var_name("A_b.c-1"));
    assert!(is_env_var_name(".x"));
    assert!(is_env_var_name("1-data-1"));
    assert!(is_env_var_name("$_-#@!%^&*()"));
    assert!(is_env_var_name("a b"));
    assert!(!is_env_var_name("a=b"));
    assert!(!is_env_var_name("tab\there"));
    assert!(!is_env_var_name("é"));
    assert!(!is_env_var_name(""));
}

fn with_services() -> FakeObjects {
    let o = objects();
    o.put_service(
        json!({"metadata": {"name": "kubernetes", "namespace": "default"},
        "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443}]}}),
    );
    o.put_service(json!({"metadata": {"name": "web", "namespace": "ns"},
        "spec": {"clusterIP": "10.96.0.8", "ports": [{"port": 80}]}}));
    o
}

/// The env of the pod's only container, `spec.enableServiceLinks` set to `links`.
async fn env_with_services(container: serde_json::Value, links: Option<bool>) -> Vec<String> {
    let mut p = pod(json!([container]));
    p.spec.as_mut().expect("spec").enable_service_links = links;
    let c = &p.spec.as_ref().expect("spec").containers[0];
    resolve_env(&p, c, &with_services(), None, None, "edge-1")
        .await
        .expect("env")
}

#[tokio::test]
async fn service_variables_come_after_the_containers_own_and_yield_to_them() {
    let got = env_with_services(
        json!({"name": "c", "env": [
        {"name": "A", "value": "$(KUBERNETES_SERVICE_PORT)/$(WEB_SERVICE_HOST)"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "1"},
        {"name": "B", "value": "$(KUBERNETES_SERVICE_PORT)"}]}),
        None,
    )
    .await;
    assert_eq!(
        got,
        [
            // $(VAR) falls back to the service variables while the container has not
            // defined VAR itself.
            "A=443/10.96.0.8",
            "KUBERNETES_SERVICE_PORT=1",
            "B=1",
            "KUBERNETES_SERVICE_HOST=10.96.0.1",
            "KUBERNETES_SERVICE_PORT_HTTPS=443",
            "KUBERNETES_PORT=tcp://10.96.0.1:443",
            "KUBERNETES_PORT_443_TCP=tcp://10.96.0.1:443",
            "KUBERNETES_PORT_443_TCP_PROTO=tcp",
            "KUBERNETES_PORT_443_TCP_PORT=443",
            "KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1",
            "WEB_SERVICE_HOST=10.96.0.8",
            "WEB_SERVICE_PORT=80",
            "WEB_PORT=tcp://10.96.0.8:80",
            "WEB_PORT_80_TCP=tcp://10.96.0.8:80",
            "WEB_PORT_80_TCP_PROTO=tcp",
            "WEB_PORT_80_TCP_PORT=80",
            "WEB_PORT_80_TCP_ADDR=10.96.0.8",
        ]
    );
}

#[tokio::test]
async fn service_links_disabled_keeps_the_master_service() {
    let container = json!({"name": "c", "env": [{"name": "X", "value": "$(WEB_SERVICE_HOST)"}]});
    let on = env_with_services(container.clone(), Some(true)).await;
    assert_eq!(on, env_with_services(container.clone(), None).await);
    assert!(on.contains(&"WEB_SERVICE_PORT=80".to_owned()), "{on:?}");
    let off = env_with_services(container, Some(false)).await;
    assert_eq!(off[0], "X=$(WEB_SERVICE_HOST)");
    assert!(off.contains(&"KUBERNETES_SERVICE_HOST=10.96.0.1".to_owned()));
    assert!(!off.iter().any(|v| v.starts_with("WEB_")), "{off:?}");
}
