//! The twin writer: the one task that owns the twin records. It takes operations
//! ([`Op`]) from [`DeviceTwinHandle`](super::DeviceTwinHandle)s in order, applies a batch of
//! them (whatever queued up, at most [`MAX_BATCH`]) to working copies, and commits the
//! batch in **one** redb transaction together with the `devicestatus` reports of the devices
//! whose cloud-visible state changed (at most one per device: the newest snapshot). Only
//! after the commit does any caller get its answer, so a DMI report answered OK is durable,
//! and reports of many devices share one disk sync.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use verge_device_api::Twin;
use verge_runtime::ErrorChain;

use super::devices::{DeviceCache, DeviceId, StoredDevice};
use super::error::Error;
use super::state;
use super::trace;
use super::twin::{self, TwinDocument, TwinRecord};
use crate::error::Result;
use ops::{Answer, status_message};
pub(crate) use ops::{Op, Reply};
use verge_edge_store::MetaStore;
use verge_edgehub::EdgeHubHandle;

mod ops;

/// Most operations applied in one transaction.
pub const MAX_BATCH: usize = 256;

/// The writer task's state.
pub(super) struct TwinWriter {
    store: MetaStore,
    hub: EdgeHubHandle,
    devices: DeviceCache,
    records: HashMap<DeviceId, TwinRecord>,
    ops: mpsc::Receiver<Op>,
    changes: broadcast::Sender<Arc<TwinDocument>>,
}

/// The changes a batch makes, before its commit.
#[derive(Default)]
struct Batch {
    /// New versions of records.
    staged: BTreeMap<DeviceId, TwinRecord>,
    /// Records to delete.
    removed: BTreeSet<DeviceId>,
    answers: Vec<Answer>,
    /// Documents to announce after the commit.
    documents: Vec<Arc<TwinDocument>>,
    /// Per device, the trace of its newest traced operation (continued by its report).
    traces: HashMap<DeviceId, verge_core::TraceContext>,
}

impl Batch {
    /// Records `trace` (when set) as the trace device `id`'s report continues.
    fn follow(&mut self, id: &DeviceId, trace: verge_core::TraceContext) {
        if !trace.is_empty() {
            self.traces.insert(id.clone(), trace);
        }
    }
}

impl TwinWriter {
    /// A writer over the records stored in `store` (loaded here, blocking).
    pub(super) fn new(
        store: MetaStore,
        hub: EdgeHubHandle,
        devices: DeviceCache,
        ops: mpsc::Receiver<Op>,
        changes: broadcast::Sender<Arc<TwinDocument>>,
    ) -> Result<Self> {
        let records = state::load_twins(&store)?;
        Ok(Self {
            store,
            hub,
            devices,
            records,
            ops,
            changes,
        })
    }

    /// Applies operations until `shutdown` or until every handle is gone; then applies what
    /// is still queued.
    pub(super) async fn run(mut self, shutdown: CancellationToken) {
        self.apply(vec![Op::SyncAll]).await;
        loop {
            let first = tokio::select! {
                () = shutdown.cancelled() => { self.ops.close(); self.ops.recv().await }
                op = self.ops.recv() => op,
            };
            let Some(first) = first else { break };
            let mut ops = vec![first];
            while ops.len() < MAX_BATCH {
                match self.ops.try_recv() {
                    Ok(op) => ops.push(op),
                    Err(_) => break,
                }
            }
            self.apply(ops).await;
        }
        info!("twin writer stopped");
    }

    /// Applies `ops` and commits them in one transaction, then answers them.
    async fn apply(&mut self, ops: Vec<Op>) {
        let now = chrono::Utc::now();
        let now_ms = now.timestamp_millis();
        let mut batch = Batch::default();
        for op in ops {
            match op {
                Op::Report {
                    id,
                    twins,
                    trace,
                    reply,
                } => {
                    batch.follow(&id, trace);
                    let result = self.report(&mut batch, &id, twins, now_ms);
                    batch.answers.push(Answer::Document(reply, result));
                }
                Op::State {
                    id,
                    state,
                    trace,
                    reply,
                } => {
                    batch.follow(&id, trace);
                    let result = self.state(&mut batch, &id, &state, now);
                    batch.answers.push(Answer::Document(reply, result));
                }
                Op::Get { id, reply } => {
                    let result = self.device(&id).map(|device| self.view(&batch, &device));
                    batch.answers.push(Answer::Twins(reply, result));
                }
                Op::List { reply } => {
                    let devices = self.devices.snapshot().devices;
                    let all = devices.values().map(|d| self.view(&batch, d)).collect();
                    batch.answers.push(Answer::List(reply, Ok(all)));
                }
                Op::Sync { id } => self.sync(&mut batch, &id, true),
                Op::SyncAll => {
                    let ids: Vec<DeviceId> = self.records.keys().cloned().collect();
                    for id in ids {
                        self.sync(&mut batch, &id, false);
                    }
                }
            }
        }
        match self.commit(&batch).await {
            Ok(()) => {
                for id in &batch.removed {
                    self.records.remove(id);
                }
                self.records.extend(std::mem::take(&mut batch.staged));
                for doc in batch.documents {
                    // Nobody listening is fine.
                    let _ = self.changes.send(doc);
                }
                for answer in batch.answers {
                    answer.send();
                }
            }
            Err(error) => {
                warn!(error = %ErrorChain(&error), "twin changes not stored");
                let shared = Arc::new(error);
                for answer in batch.answers {
                    answer.fail(&shared);
                }
            }
        }
    }

    /// Commits the batch's records with the `devicestatus` reports of the devices whose
    /// status report changed, each made in a `devicetwin.report` span (see `trace`).
    async fn commit(&self, batch: &Batch) -> Result<()> {
        let staged: Vec<(DeviceId, TwinRecord)> = batch
            .staged
            .iter()
            .filter(|(id, r)| self.records.get(*id) != Some(*r))
            .map(|(id, r)| (id.clone(), r.clone()))
            .collect();
        if staged.is_empty() && batch.removed.is_empty() {
            return Ok(());
        }
        let mut reports = Vec::new();
        let mut spans = Vec::new();
        for (id, record) in &staged {
            let Some(device) = self.devices.device(id) else {
                continue;
            };
            let after = twin::status_report(&device.device, record);
            let empty = TwinRecord::new(record.uid.clone());
            let committed = self
                .records
                .get(id)
                .filter(|r| r.uid == record.uid)
                .unwrap_or(&empty);
            if twin::status_report(&device.device, committed) != after {
                let parent = batch.traces.get(id).cloned().unwrap_or_default();
                let span = trace::report_span(id, after.twins.len(), &parent);
                let mut message = status_message(&device, &after)?;
                message.trace = verge_telemetry::propagation::inject(&span);
                reports.push(message);
                spans.push(span);
            }
        }
        debug!(
            records = staged.len(),
            removed = batch.removed.len(),
            reports = reports.len(),
            "committing twin changes"
        );
        let removed: Vec<DeviceId> = batch.removed.iter().cloned().collect();
        let committed = self
            .hub
            .report_with(&self.store, move |txn| {
                for (id, record) in &staged {
                    state::put_twin(txn, id, record)?;
                }
                for id in &removed {
                    state::remove_twin(txn, id)?;
                }
                Ok(((), reports))
            })
            .await;
        for span in spans {
            trace::end(span, committed.is_err());
        }
        committed
    }

    fn report(
        &self,
        batch: &mut Batch,
        id: &DeviceId,
        twins: Vec<Twin>,
        now_ms: i64,
    ) -> Result<TwinDocument> {
        let doc = self.with_record(batch, id, |device, model, record| {
            twin::check_report(device, &twins)?;
            let last = twin::view(device, model, record);
            let updated = twin::apply_report(record, twins, now_ms);
            Ok(TwinDocument {
                updated,
                last,
                current: twin::view(device, model, record),
                timestamp_ms: now_ms,
            })
        })?;
        batch.documents.push(Arc::new(doc.clone()));
        Ok(doc)
    }

    fn state(
        &self,
        batch: &mut Batch,
        id: &DeviceId,
        state: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<TwinDocument> {
        let state = twin::check_state(state)?;
        let mut changed = false;
        let doc = self.with_record(batch, id, |device, model, record| {
            let last = twin::view(device, model, record);
            changed = twin::apply_state(record, state, now);
            Ok(TwinDocument {
                updated: BTreeSet::new(),
                last,
                current: twin::view(device, model, record),
                timestamp_ms: now.timestamp_millis(),
            })
        })?;
        if changed {
            batch.documents.push(Arc::new(doc.clone()));
        }
        Ok(doc)
    }

    /// Runs `f` on a copy of the working record of `id` (staged in `batch`, else the
    /// committed one; empty for a Device without one or with a record of an older uid) and
    /// stages the copy when `f` succeeds (a failed operation leaves nothing behind).
    fn with_record<T>(
        &self,
        batch: &mut Batch,
        id: &DeviceId,
        f: impl FnOnce(
            &verge_device_api::Device,
            Option<&verge_device_api::DeviceModel>,
            &mut TwinRecord,
        ) -> Result<T>,
    ) -> Result<T> {
        let device = self.device(id)?;
        let model = device.model_id().and_then(|m| self.devices.model(&m));
        let mut record = self
            .current(batch, id)
            .filter(|r| r.uid == device.uid)
            .cloned()
            .unwrap_or_else(|| TwinRecord::new(device.uid.clone()));
        let out = f(
            &device.device,
            model.as_ref().map(|m| &m.model),
            &mut record,
        )?;
        batch.removed.remove(id);
        batch.staged.insert(id.clone(), record);
        Ok(out)
    }

    /// The twin of `device` as the batch left it.
    fn view(&self, batch: &Batch, device: &StoredDevice) -> twin::DeviceTwins {
        let empty = TwinRecord::new(device.uid.clone());
        let record = self
            .current(batch, &device.id())
            .filter(|r| r.uid == device.uid)
            .unwrap_or(&empty);
        let model = device.model_id().and_then(|m| self.devices.model(&m));
        twin::view(&device.device, model.as_ref().map(|m| &m.model), record)
    }

    /// The working record of `id`: staged in `batch`, else committed (unless removed).
    fn current<'a>(&'a self, batch: &'a Batch, id: &DeviceId) -> Option<&'a TwinRecord> {
        if batch.removed.contains(id) {
            return None;
        }
        batch.staged.get(id).or_else(|| self.records.get(id))
    }

    fn device(&self, id: &DeviceId) -> Result<Arc<StoredDevice>> {
        self.devices.device(id).ok_or_else(|| Error::UnknownDevice {
            namespace: id.namespace.clone(),
            name: id.name.clone(),
        })
    }

    fn sync(&self, batch: &mut Batch, id: &DeviceId, announce: bool) {
        let Some(record) = self.current(batch, id) else {
            return;
        };
        match self.devices.device(id) {
            Some(device) if device.uid == record.uid => {
                let mut kept = record.clone();
                twin::retain_properties(&mut kept, &device.device);
                if &kept != record {
                    batch.staged.insert(id.clone(), kept);
                }
                if announce {
                    self.announce_delta(batch, &device);
                }
            }
            _ => {
                debug!(device = %id, "twin record of a removed or replaced device dropped");
                batch.staged.remove(id);
                batch.removed.insert(id.clone());
            }
        }
    }

    /// After the cloud changed Device `device` (e.g. a new desired value): when desired and
    /// reported differ, a document naming those properties, so that edge apps get
    /// `twin/update/delta` as KubeEdge sends it when the cloud updates a twin.
    fn announce_delta(&self, batch: &mut Batch, device: &StoredDevice) {
        let view = self.view(batch, device);
        let updated: BTreeSet<String> = view.delta().into_keys().collect();
        if updated.is_empty() {
            return;
        }
        batch.documents.push(Arc::new(TwinDocument {
            updated,
            last: view.clone(),
            current: view,
            timestamp_ms: chrono::Utc::now().timestamp_millis(),
        }));
    }
}
