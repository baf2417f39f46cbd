//! [`ContainerRuntime`] for [`FakeRuntime`]: containers, images and events in memory.

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use tokio_stream::wrappers::BroadcastStream;

use super::super::types::{
    ContainerInfo, ContainerSpec, ContainerSummary, ExecOutput, ImageInfo, ImageSummary,
    LinuxResources, ListFilter, NetworkEnsured, NetworkMode, NetworkSpec, RegistryAuth, RunState,
    RuntimeEvent, Scope,
};
use super::super::{ContainerRuntime, Result, RuntimeError, labels};
use super::{FakeContainer, FakeFailure, FakeRuntime};

/// The address a sandbox started on a pod network gets: the gateway's with its last octet
/// raised by a number (wrapping), `None` on other networks.
fn fake_ip(
    networks: &std::collections::HashMap<String, NetworkSpec>,
    mode: &NetworkMode,
    n: u64,
) -> Option<String> {
    let NetworkMode::Network(name) = mode else {
        return None;
    };
    let gateway: std::net::Ipv4Addr = networks.get(name)?.gateway.parse().ok()?;
    let [a, b, c, d] = gateway.octets();
    let last = u8::try_from((u64::from(d) + n) % 254 + 1).unwrap_or(2);
    Some(std::net::Ipv4Addr::new(a, b, c, last).to_string())
}

impl ContainerRuntime for FakeRuntime {
    async fn ensure_network(&self, spec: &NetworkSpec) -> Result<NetworkEnsured> {
        let mut state = self.lock();
        state.calls.push(format!("ensure network {}", spec.name));
        let attached = |state: &super::State| {
            state
                .containers
                .values()
                .any(|c| c.spec.network == NetworkMode::Network(spec.name.clone()))
        };
        let ensured = match state.networks.get(&spec.name) {
            Some(existing) if existing == spec => return Ok(NetworkEnsured::Existing),
            Some(_) if attached(&state) => {
                return Err(RuntimeError::Conflict {
                    op: format!("remove network {}", spec.name),
                    source: Box::new(FakeFailure("network has active endpoints".to_owned())),
                });
            }
            Some(_) => NetworkEnsured::Replaced,
            None => NetworkEnsured::Created,
        };
        state.networks.insert(spec.name.clone(), spec.clone());
        Ok(ensured)
    }

    async fn version(&self) -> Result<String> {
        Ok("docker://fake".to_owned())
    }

    async fn list(&self, filter: &ListFilter) -> Result<Vec<ContainerSummary>> {
        let state = self.lock();
        let mut out: Vec<(i64, ContainerSummary)> = Vec::new();
        for c in state.containers.values() {
            let l = &c.info.labels;
            let node_ok =
                filter.scope == Scope::Engine || l.get(labels::MANAGED) == Some(&self.node);
            let pod_ok = match &filter.pod_uid {
                Some(uid) => l.get(labels::POD_UID) == Some(uid),
                None => !filter.pods_only || l.contains_key(labels::POD_UID),
            };
            let dead_ok = !filter.dead_only || c.info.state != RunState::Running;
            if node_ok && pod_ok && dead_ok {
                let word = match c.info.state {
                    RunState::Created => "created",
                    RunState::Running => "running",
                    RunState::Exited => "exited",
                };
                out.push((
                    c.created,
                    ContainerSummary {
                        id: c.info.id.clone(),
                        labels: l.clone(),
                        state: word.to_owned(),
                        created: c.created,
                        image_id: Some(c.info.image_id.clone()),
                        ip: c
                            .info
                            .ip
                            .clone()
                            .filter(|_| c.info.state == RunState::Running),
                    },
                ));
            }
        }
        out.sort_by_key(|(created, _)| *created);
        Ok(out.into_iter().map(|(_, s)| s).collect())
    }

    async fn inspect(&self, id: &str) -> Result<Option<ContainerInfo>> {
        Ok(self.lock().containers.get(id).map(|c| c.info.clone()))
    }

    async fn create(&self, name: &str, mut spec: ContainerSpec) -> Result<String> {
        spec.labels
            .insert(labels::MANAGED.to_owned(), self.node.clone());
        let mut state = self.lock();
        state.calls.push(format!("create {name}"));
        if state.containers.values().any(|c| c.name == name) {
            return Err(RuntimeError::Conflict {
                op: format!("create {name}"),
                source: Box::new(FakeFailure("name in use".to_owned())),
            });
        }
        if !state.images.contains(&spec.image) {
            return Err(Self::failure(format!("create {name}"), "No such image"));
        }
        if !spec.image_mounts.is_empty() && state.no_image_mounts {
            let message = "invalid mount config for type \"image\": mount type unknown";
            return Err(Self::failure(format!("create {name}"), message));
        }
        for m in &spec.image_mounts {
            if !state.images.contains(m.image.trim_start_matches("sha256:")) {
                let message = format!("No such image: {}", m.image);
                return Err(Self::failure(format!("create {name}"), &message));
            }
        }
        state.next_id += 1;
        let id = format!("c{:04}", state.next_id);
        let created = i64::try_from(state.next_id).unwrap_or(i64::MAX);
        let info = ContainerInfo {
            id: id.clone(),
            labels: spec.labels.clone(),
            state: RunState::Created,
            exit_code: 0,
            oom_killed: false,
            error: None,
            started_at: None,
            finished_at: None,
            image: spec.image.clone(),
            image_id: format!("sha256:{}", spec.image),
            ip: None,
            resources: spec.resources,
        };
        state.containers.insert(
            id.clone(),
            FakeContainer {
                name: name.to_owned(),
                spec,
                info,
                created,
            },
        );
        Ok(id)
    }

    async fn start(&self, id: &str) -> Result<()> {
        let name = self
            .lock()
            .containers
            .get(id)
            .and_then(|c| c.info.labels.get(labels::CONTAINER_NAME).cloned());
        let gate = name.and_then(|n| self.lock().gates.remove(&n));
        if let Some(gate) = gate {
            gate.reached.notify_one();
            gate.release.notified().await;
        }
        let now = self.now();
        let exited = {
            let mut state = self.lock();
            state.calls.push(format!("start {id}"));
            let Some(c) = state.containers.get(id) else {
                return Err(Self::not_found(format!("start {id}")));
            };
            let name = c
                .info
                .labels
                .get(labels::CONTAINER_NAME)
                .cloned()
                .unwrap_or_default();
            let sandbox = name == labels::SANDBOX_NAME;
            if let Some(message) = state.fail_start.get(&name).cloned() {
                return Err(Self::failure(format!("start {id}"), &message));
            }
            // A fixed address another running container holds (Docker's answer).
            let fixed = c.spec.ipv4_address.clone();
            let held = fixed.is_some_and(|ip| {
                state.containers.values().any(|o| {
                    o.info.id != id
                        && o.info.state == RunState::Running
                        && o.info.ip.as_deref() == Some(ip.as_str())
                })
            });
            if held {
                return Err(Self::failure(
                    format!("start {id}"),
                    "Address already in use",
                ));
            }
            let exit = state.exit_on_start.get(&name).copied();
            let (networks, next_id) = (state.networks.clone(), state.next_id);
            let Some(c) = state.containers.get_mut(id) else {
                return Err(Self::not_found(format!("start {id}")));
            };
            c.info.state = RunState::Running;
            c.info.started_at = Some(now.clone());
            c.info.finished_at = None;
            if let Some(fixed) = &c.spec.ipv4_address {
                c.info.ip = Some(fixed.clone());
            } else if sandbox {
                // Addresses come with the start, as Docker's.
                let on_network = fake_ip(&networks, &c.spec.network, next_id);
                c.info.ip = on_network.or_else(|| Some("10.88.0.2".to_owned()));
            }
            if let Some(code) = exit {
                c.info.state = RunState::Exited;
                c.info.exit_code = code;
                c.info.finished_at = Some(now);
            }
            exit.is_some()
        };
        let _ = self.events.send(RuntimeEvent::Start(id.to_owned()));
        if exited {
            let _ = self.events.send(RuntimeEvent::Die(id.to_owned()));
        }
        Ok(())
    }

    async fn stop(&self, id: &str, grace: Duration) -> Result<()> {
        let running = {
            let mut state = self.lock();
            state.calls.push(format!("stop {id} {}s", grace.as_secs()));
            state
                .containers
                .get(id)
                .is_some_and(|c| c.info.state == RunState::Running)
        };
        if running {
            self.exit(id, 137);
        }
        Ok(())
    }

    async fn remove(&self, id: &str, force: bool) -> Result<()> {
        let mut state = self.lock();
        state.calls.push(format!("remove {id}"));
        let key = state
            .containers
            .iter()
            .find(|(cid, c)| cid.as_str() == id || c.name == id)
            .map(|(cid, c)| (cid.clone(), c.info.state));
        match key {
            None => Err(Self::not_found(format!("remove {id}"))),
            Some((_, RunState::Running)) if !force => Err(RuntimeError::Conflict {
                op: format!("remove {id}"),
                source: Box::new(FakeFailure("container is running".to_owned())),
            }),
            Some((cid, _)) => {
                state.containers.remove(&cid);
                drop(state);
                let _ = self.events.send(RuntimeEvent::Destroy(cid));
                Ok(())
            }
        }
    }

    async fn update_resources(&self, id: &str, r: &LinuxResources) -> Result<()> {
        let mut state = self.lock();
        let show = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
        state.calls.push(format!(
            "update {id} shares={} quota={} memory={}",
            show(r.cpu_shares),
            show(r.cpu_quota),
            show(r.memory)
        ));
        let Some(c) = state.containers.get(id) else {
            return Err(Self::not_found(format!("update {id}")));
        };
        let name = c.info.labels.get(labels::CONTAINER_NAME).cloned();
        if let Some(message) = name.and_then(|n| state.fail_update.get(&n).cloned()) {
            return Err(Self::failure(format!("update {id}"), &message));
        }
        if let Some(c) = state.containers.get_mut(id) {
            let held = &mut c.info.resources;
            let keep = |new: Option<i64>, old: Option<i64>| new.or(old);
            held.cpu_shares = keep(r.cpu_shares, held.cpu_shares);
            held.cpu_period = keep(r.cpu_quota.and(r.cpu_period), held.cpu_period);
            held.cpu_quota = keep(r.cpu_quota, held.cpu_quota);
            held.memory = keep(r.memory, held.memory);
            c.spec.resources = *held;
        }
        Ok(())
    }

    async fn memory_usage(&self, id: &str) -> Result<Option<u64>> {
        let state = self.lock();
        match state.containers.get(id) {
            None => Err(Self::not_found(format!("stats {id}"))),
            Some(c) if c.info.state != RunState::Running => Ok(None),
            Some(_) => Ok(Some(state.memory_usage.get(id).copied().unwrap_or(0))),
        }
    }

    fn events(&self) -> BoxStream<'static, Result<RuntimeEvent>> {
        BroadcastStream::new(self.events.subscribe())
            .filter_map(|e| async move { e.ok().map(Ok) })
            .boxed()
    }

    async fn exec(&self, id: &str, cmd: &[String], _max_output: usize) -> Result<ExecOutput> {
        let mut state = self.lock();
        let command = cmd.join(" ");
        state.calls.push(format!("exec {id} {command}"));
        let code = state.exec_exit.get(&command).copied().unwrap_or(0);
        match state.containers.get(id) {
            Some(c) if c.info.state == RunState::Running => Ok(ExecOutput {
                exit_code: Some(code),
                output: Vec::new(),
            }),
            _ => Err(Self::not_found("create exec".to_owned())),
        }
    }

    async fn log_tail(&self, id: &str, lines: usize) -> Result<Vec<u8>> {
        let state = self.lock();
        if !state.containers.contains_key(id) {
            return Err(Self::not_found(format!("logs {id}")));
        }
        let text =
            String::from_utf8_lossy(state.logs.get(id).map_or(&[][..], Vec::as_slice)).into_owned();
        let all: Vec<&str> = text.split_inclusive('\n').collect();
        Ok(all[all.len().saturating_sub(lines)..].concat().into_bytes())
    }

    async fn image_status(&self, image: &str) -> Result<Option<ImageInfo>> {
        let present = self
            .lock()
            .images
            .contains(image.trim_start_matches("sha256:"));
        Ok(present.then(|| ImageInfo {
            id: format!("sha256:{}", image.trim_start_matches("sha256:")),
            repo_digests: Vec::new(),
            user: String::new(),
        }))
    }

    async fn pull_image(&self, image: &str, _auth: Option<RegistryAuth>) -> Result<()> {
        let mut state = self.lock();
        state.calls.push(format!("pull {image}"));
        if let Some(message) = state.fail_pull.get(image).cloned() {
            if crate::image::registry_unreachable(&message) {
                return Err(RuntimeError::RegistryUnreachable {
                    op: format!("pull {image}"),
                    source: Box::new(FakeFailure(message)),
                });
            }
            return Err(Self::failure(format!("pull {image}"), &message));
        }
        state.images.insert(image.to_owned());
        Ok(())
    }

    async fn supports_image_mounts(&self) -> Result<bool> {
        Ok(!self.lock().no_image_mounts)
    }

    async fn image_layers(&self, image: &str) -> Result<Option<Vec<PathBuf>>> {
        let mut state = self.lock();
        state.calls.push(format!("layers {image}"));
        let name = image.trim_start_matches("sha256:");
        if !state.images.contains(name) {
            return Err(RuntimeError::NotFound {
                op: format!("inspect image {image}"),
                source: Box::new(FakeFailure("No such image".to_owned())),
            });
        }
        Ok(state.image_layers.get(name).cloned())
    }

    async fn list_images(&self) -> Result<Vec<ImageSummary>> {
        Ok(self
            .lock()
            .images
            .iter()
            .map(|i| ImageSummary {
                id: format!("sha256:{i}"),
                repo_tags: vec![i.clone()],
                size: 0,
            })
            .collect())
    }

    async fn remove_image(&self, reference: &str) -> Result<()> {
        self.lock().images.remove(reference);
        Ok(())
    }

    async fn image_fs_root(&self) -> Result<Option<PathBuf>> {
        Ok(None)
    }
}
