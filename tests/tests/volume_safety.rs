//! Safe volumes and data at rest on the edge, end to end (issue 10, points 5 and 6): the
//! real control plane, cloudhub, edgecontroller, edgecore and Docker.
//!
//! * A pod whose init container writes `link -> /` into an emptyDir and whose containers
//!   mount `subPath: link` and `subPath: link/<name>`: those containers wait with
//!   `CreateContainerConfigError` and a Warning event, no container binds the host's `/`
//!   and nothing is created there; a third container with a plain subPath runs from its
//!   pinned mount point, which goes with the pod.
//! * A pod with a secret volume: its file and the redb file cannot be read by another user
//!   of the host (checked by reading them as `nobody`), the data, pods and pod directories
//!   are 0700 (fixed on start when they existed wider), the redb file 0600, the secret on a
//!   tmpfs.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, Event, Namespace, Pod, Secret};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use verge_e2e::host::{Unmount, all_bind_sources, mounts_under, mounts_with_types, nobody_reads};
use verge_e2e::{Cloud, Edge, containers_with, create_namespace, docker, wait_for};

const IMAGE: &str = verge_testkit::docker::TEST_IMAGE;

/// The scenarios start their own cloud services and edgecore; one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Setup {
    /// Dropped first: unmounts leftovers under the edge's directory.
    _unmount: Unmount,
    client: Client,
    cloud: Cloud,
    edge: Edge,
    ns: String,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl Setup {
    /// Cloud services and an edge; `before_start` prepares the edge's directory.
    async fn new(
        tag: &str,
        before_start: impl FnOnce(&Edge) -> anyhow::Result<()>,
    ) -> anyhow::Result<Self> {
        verge_telemetry::init_for_tests();
        let serial = SERIAL.lock().await;
        let cp = verge_testkit::shared().await?;
        let client = cp.client().await?;
        let cloud = Cloud::start(&cp).await?;
        let name = format!("e2e-{tag}-{}", std::process::id());
        let mut edge = Edge::new(&name, &cloud)?;
        let unmount = Unmount(
            edge.config_path()
                .parent()
                .unwrap_or(Path::new("/nonexistent"))
                .to_owned(),
        );
        before_start(&edge)?;
        edge.start()?;
        verge_testkit::wait::wait_node_ready(&client, &name, Duration::from_secs(30)).await?;
        create_namespace(&client, &name).await?;
        Ok(Self {
            _unmount: unmount,
            client,
            cloud,
            edge,
            ns: name,
            _serial: serial,
        })
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    fn logs(&self) -> String {
        format!(
            "{}\n--- edgecore ---\n{}",
            self.cloud.logs(30),
            self.edge.logs(80)
        )
    }

    /// Creates a pod pinned to this edge from a JSON `spec` fragment.
    async fn create_pod(&self, name: &str, mut spec: serde_json::Value) -> anyhow::Result<()> {
        spec["nodeSelector"] = json!({"kubernetes.io/hostname": self.edge.name});
        spec["terminationGracePeriodSeconds"] = json!(1);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": self.ns}, "spec": spec,
        }))?;
        self.pods().create(&PostParams::default(), &pod).await?;
        Ok(())
    }

    async fn wait_pod(
        &self,
        name: &str,
        what: &str,
        f: impl Fn(&Pod) -> bool,
    ) -> anyhow::Result<Pod> {
        let pods = self.pods();
        let r = wait_for(what, Duration::from_secs(60), || {
            let (pods, f) = (pods.clone(), &f);
            async move { Ok(pods.get_opt(name).await?.filter(|p| f(p))) }
        })
        .await;
        match r {
            Ok(p) => Ok(p),
            Err(e) => {
                let status = self
                    .pods()
                    .get_opt(name)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|p| p.status);
                let status = serde_json::to_string_pretty(&status).unwrap_or_default();
                anyhow::bail!("{e:#}\npod status: {status}\n{}", self.logs())
            }
        }
    }

    /// Deletes pod `name` and waits until it is gone and edgecore removed its directory.
    async fn delete_pod(&self, name: &str, pod_dir: &Path) -> anyhow::Result<()> {
        self.pods().delete(name, &DeleteParams::default()).await?;
        let pods = self.pods();
        let r = wait_for(
            "pod and pod directory gone",
            Duration::from_secs(60),
            || {
                let pods = pods.clone();
                async move {
                    Ok((pods.get_opt(name).await?.is_none() && !pod_dir.exists()).then_some(()))
                }
            },
        )
        .await;
        if let Err(e) = r {
            anyhow::bail!("{e:#}\n{}", self.logs());
        }
        Ok(())
    }

    async fn cleanup(self) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let _ = namespaces.delete(&self.ns, &DeleteParams::default()).await;
        for id in
            containers_with(&[("io.kubernetes.pod.namespace", &self.ns)], true).unwrap_or_default()
        {
            let _ = docker(&["rm", "-f", &id]);
        }
    }
}

fn status<'a>(p: &'a Pod, name: &str) -> Option<&'a ContainerStatus> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
}

/// (reason, message) of container `name`'s waiting state.
fn waiting(p: &Pod, name: &str) -> Option<(String, String)> {
    let w = status(p, name)?.state.as_ref()?.waiting.as_ref()?;
    Some((w.reason.clone()?, w.message.clone().unwrap_or_default()))
}

fn running(p: &Pod, name: &str) -> bool {
    status(p, name).is_some_and(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

#[tokio::test(flavor = "multi_thread")]
async fn symlink_sub_path_is_refused_and_exposes_nothing() -> anyhow::Result<()> {
    let s = Setup::new("subpath", |_| Ok(())).await?;
    let marker = format!("verge-should-not-exist-{}", std::process::id());
    let sleeper = |name: &str, sub: &str, path: &str| {
        json!({"name": name, "image": IMAGE, "imagePullPolicy": "Never",
               "command": ["sleep", "3600"],
               "volumeMounts": [{"name": "data", "mountPath": path, "subPath": sub}]})
    };
    s.create_pod(
        "escape",
        json!({
            "initContainers": [{"name": "plant", "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["sh", "-c", "ln -s / /data/link && mkdir -p /data/ok"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "containers": [
                sleeper("escape", "link", "/host"),
                sleeper("deep", &format!("link/{marker}"), "/deep"),
                sleeper("fine", "ok/nested", "/fine"),
            ],
            "volumes": [{"name": "data", "emptyDir": {}}]
        }),
    )
    .await?;
    let refused = |p: &Pod, c: &str| {
        waiting(p, c).is_some_and(|(r, m)| {
            r == "CreateContainerConfigError"
                && m.contains("is a symlink leading out of the volume; refused")
        })
    };
    let p = s
        .wait_pod("escape", "escape and deep refused, fine running", |p| {
            refused(p, "escape") && refused(p, "deep") && running(p, "fine")
        })
        .await?;
    let (_, message) = waiting(&p, "escape").unwrap_or_default();
    eprintln!("waiting message: {message}");
    assert!(message.contains("subPath \"link\""), "{message}");

    // A Warning event `Failed` names the refusal, as the kubelet's would.
    let events: Api<Event> = Api::namespaced(s.client.clone(), &s.ns);
    let r = wait_for(
        "Warning event for the refused subPath",
        Duration::from_secs(30),
        || {
            let events = events.clone();
            async move {
                let list = events
                    .list(&ListParams::default().fields("involvedObject.name=escape"))
                    .await?;
                Ok(list.items.into_iter().find(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.reason.as_deref() == Some("Failed")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.contains("symlink leading out of the volume"))
                }))
            }
        },
    )
    .await;
    let event = match r {
        Ok(e) => e,
        Err(e) => anyhow::bail!("{e:#}\n{}", s.logs()),
    };
    assert_eq!(
        event.involved_object.field_path.as_deref(),
        Some("spec.containers{escape}"),
        "{event:?}"
    );

    // Nothing exposed: no container of the engine binds the host's `/`, the refused
    // containers were never created, and nothing was made on the host.
    let binds = all_bind_sources()?;
    assert!(!binds.iter().any(|(_, src)| src == "/"), "{binds:?}");
    let uid = p.metadata.uid.clone().unwrap_or_default();
    for c in ["escape", "deep"] {
        let made = containers_with(
            &[
                ("io.kubernetes.pod.uid", &uid),
                ("io.kubernetes.container.name", c),
            ],
            true,
        )?;
        assert!(made.is_empty(), "{c} never created: {made:?}");
    }
    assert!(
        !Path::new("/").join(&marker).exists(),
        "/{marker} was created"
    );

    // The running container's subPath comes from its pin, which goes with the pod.
    let pod_dir = std::fs::canonicalize(s.edge.data_dir())?
        .join("pods")
        .join(&uid);
    let pin = pod_dir.join("volume-subpaths/data/fine/0");
    let fine = containers_with(
        &[
            ("io.kubernetes.pod.uid", &uid),
            ("io.kubernetes.container.name", "fine"),
        ],
        false,
    )?;
    let fine = fine
        .first()
        .ok_or_else(|| anyhow::anyhow!("no fine container"))?;
    let sources = docker(&[
        "inspect",
        "-f",
        "{{range .Mounts}}{{.Source}} {{end}}",
        fine,
    ])?;
    assert!(sources.contains(pin.to_str().unwrap_or("?")), "{sources}");
    assert!(mounts_under(&pod_dir).contains(&pin), "pin mounted");
    docker(&["exec", fine, "sh", "-c", "echo hi > /fine/f"])?;
    assert_eq!(
        std::fs::read_to_string(pod_dir.join("volumes/data/ok/nested/f"))?,
        "hi\n"
    );

    s.delete_pod("escape", &pod_dir).await?;
    assert_eq!(mounts_under(&pod_dir), Vec::<PathBuf>::new());
    s.cleanup().await;
    Ok(())
}

fn mode(p: &Path) -> anyhow::Result<u32> {
    Ok(std::fs::metadata(p)?.mode() & 0o7777)
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_and_store_are_private_to_root() -> anyhow::Result<()> {
    let s = Setup::new("private", |edge| {
        // Only edgecore's own modes may protect the data: the directory around it is open,
        // and the data and pods directories exist already, too wide.
        let around = edge
            .data_dir()
            .parent()
            .map(Path::to_owned)
            .unwrap_or_default();
        std::fs::set_permissions(&around, std::fs::Permissions::from_mode(0o755))?;
        std::fs::create_dir_all(edge.data_dir().join("pods"))?;
        for d in [edge.data_dir(), edge.data_dir().join("pods")] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755))?;
        }
        let control = around.join("control");
        std::fs::write(&control, "readable")?;
        std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o644))?;
        Ok(())
    })
    .await?;
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &s.ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "creds"}, "stringData": {"password": "s3cr3t"}}),
            )?,
        )
        .await?;
    s.create_pod(
        "reader",
        json!({
            "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["sleep", "3600"],
                "volumeMounts": [{"name": "creds", "mountPath": "/etc/creds"}]}],
            "volumes": [{"name": "creds", "secret": {"secretName": "creds"}}]
        }),
    )
    .await?;
    let p = s
        .wait_pod("reader", "pod Running", |p| running(p, "main"))
        .await?;
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let id = containers_with(
        &[
            ("io.kubernetes.pod.uid", &uid),
            ("io.kubernetes.container.name", "main"),
        ],
        false,
    )?
    .pop()
    .ok_or_else(|| anyhow::anyhow!("no container"))?;
    assert_eq!(
        docker(&["exec", &id, "cat", "/etc/creds/password"])?,
        "s3cr3t"
    );

    let data = std::fs::canonicalize(s.edge.data_dir())?;
    let pod_dir = data.join("pods").join(&uid);
    let volume = pod_dir.join("volumes/creds");
    let secret = volume.join("password");
    let store = data.join("edgecore.redb");
    for (dir, want) in [
        (&data, 0o700),
        (&data.join("pods"), 0o700),
        (&pod_dir, 0o700),
    ] {
        assert_eq!(mode(dir)?, want, "{}", dir.display());
        assert_eq!(
            std::fs::metadata(dir)?.uid(),
            0,
            "{} owned by root",
            dir.display()
        );
    }
    assert_eq!(mode(&store)?, 0o600);
    assert_eq!(mode(&secret)?, 0o644, "defaultMode kept");
    let types = mounts_with_types(&volume);
    assert!(
        types.iter().any(|(p, t)| *p == volume && t == "tmpfs"),
        "secret on a tmpfs: {types:?}"
    );

    // Really unreadable by another user; the control file shows that setpriv works.
    let control = data.parent().map(|d| d.join("control")).unwrap_or_default();
    assert!(
        nobody_reads(&control)?,
        "nobody reads a world-readable file"
    );
    assert_eq!(
        std::fs::read_to_string(&secret)?,
        "s3cr3t",
        "root reads the secret"
    );
    assert!(!nobody_reads(&secret)?, "nobody cannot read the secret");
    assert!(!nobody_reads(&store)?, "nobody cannot read the store");

    s.delete_pod("reader", &pod_dir).await?;
    assert_eq!(
        mounts_under(&pod_dir),
        Vec::<PathBuf>::new(),
        "tmpfs unmounted"
    );
    s.cleanup().await;
    Ok(())
}
