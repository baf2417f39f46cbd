//! One virtual device: its properties' simulated values and when each is collected and
//! reported. Pure state (time is passed in), driven by [`crate::worker`].
//!
//! Per property, every `collectCycle` ms the value is "read": a writable property
//! (`accessMode: ReadWrite` in the model, or any property when the model is unknown) with a
//! desired value holds that value (writing it to the virtual device applies it), every other
//! property takes the next step of its [`Simulation`]. Every `reportCycle` ms its twin is due:
//! `reported` is the last reading, `observedDesired` the desired value as received. Cycles of
//! 0 or less mean 1 s, as in KubeEdge's mapper-framework. The device's state is due every
//! `status.reportCycle` ms (1 s when 0).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::Rng;
use tokio::time::Instant;
use verge_proto::dmi::v1beta1::{
    Device, DeviceModel, DeviceProperty, ModelProperty, Twin, TwinProperty,
};

use crate::config_data::{self, ConfigData};
use crate::simulation::{DataType, Simulation};

/// The cycle used when a Device leaves one at 0 (mapper-framework's default).
pub const DEFAULT_CYCLE: Duration = Duration::from_secs(1);

/// What [`VirtualDevice::poll`] found due.
#[derive(Debug, Default, PartialEq)]
pub struct Due {
    /// Twins to send in one ReportDeviceStatus (empty: none due).
    pub twins: Vec<Twin>,
    /// Whether the device's state is due (ReportDeviceStates).
    pub state: bool,
}

/// A virtual device and the schedule of its properties.
#[derive(Debug)]
pub struct VirtualDevice {
    device: Device,
    properties: Vec<Property>,
    state_every: Duration,
    next_state: Instant,
}

#[derive(Debug)]
struct Property {
    name: String,
    simulation: Simulation,
    writable: bool,
    desired: TwinProperty,
    value: String,
    read_at_ms: u128,
    collect_every: Duration,
    report_every: Duration,
    next_collect: Instant,
    next_report: Instant,
}

impl VirtualDevice {
    /// Starts `device` at `now` (its model, when known, gives types, bounds and access modes):
    /// every property is read at once and first reported at once.
    pub fn new(device: Device, model: Option<&DeviceModel>, now: Instant) -> Self {
        let mut this = Self {
            device: Device::default(),
            properties: Vec::new(),
            state_every: DEFAULT_CYCLE,
            next_state: now,
        };
        this.update(device, model, now);
        this
    }

    /// Takes a new description of the device (UpdateDevice, or its model changed). Properties
    /// keep their current values and schedule; a changed desired value of a writable property
    /// is applied at once, and a property whose desired value changed is reported at once.
    pub fn update(&mut self, device: Device, model: Option<&DeviceModel>, now: Instant) {
        let mut old: HashMap<String, Property> = self
            .properties
            .drain(..)
            .map(|p| (p.name.clone(), p))
            .collect();
        let spec = device.spec.clone().unwrap_or_default();
        self.properties = spec
            .properties
            .iter()
            .map(|p| {
                let model_property = model.and_then(|m| {
                    m.spec
                        .as_ref()
                        .and_then(|s| s.properties.iter().find(|mp| mp.name == p.name))
                });
                Property::build(p, model_property, old.remove(&p.name), now)
            })
            .collect();
        let status_cycle = device.status.as_ref().map_or(0, |s| s.report_cycle);
        let state_every = cycle(status_cycle);
        if state_every != self.state_every {
            self.state_every = state_every;
            self.next_state = self.next_state.min(now + state_every);
        }
        self.device = device;
    }

    /// The device as last received.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// `spec.deviceModelReference` (the model's name, in the device's namespace).
    pub fn model_name(&self) -> &str {
        self.device
            .spec
            .as_ref()
            .map_or("", |s| s.device_model_reference.as_str())
    }

    /// The earliest instant at which something is due.
    pub fn next_deadline(&self) -> Instant {
        self.properties
            .iter()
            .flat_map(|p| [p.next_collect, p.next_report])
            .fold(self.next_state, Instant::min)
    }

    /// Collects every property whose collection is due at `now` and returns the twins and
    /// state due. Schedules advance by whole cycles; a schedule that fell behind restarts
    /// from `now`.
    pub fn poll(&mut self, now: Instant, rng: &mut impl Rng) -> Due {
        let mut due = Due::default();
        let namespace = &self.device.namespace;
        let device = &self.device.name;
        for p in &mut self.properties {
            if p.next_collect <= now {
                p.collect(rng);
                tracing::debug!(
                    namespace,
                    device,
                    property = p.name,
                    value = p.value,
                    "read"
                );
                p.next_collect = advance(p.next_collect, p.collect_every, now);
            }
            if p.next_report <= now {
                due.twins.push(p.twin());
                p.next_report = advance(p.next_report, p.report_every, now);
            }
        }
        if self.next_state <= now {
            due.state = true;
            self.next_state = advance(self.next_state, self.state_every, now);
        }
        due
    }

    /// Every property's current twin (GetDevice).
    pub fn twins(&self) -> Vec<Twin> {
        self.properties.iter().map(Property::twin).collect()
    }
}

impl Property {
    fn build(
        spec: &DeviceProperty,
        model: Option<&ModelProperty>,
        old: Option<Property>,
        now: Instant,
    ) -> Self {
        let visitor =
            config_data::decode(spec.visitors.as_ref().and_then(|v| v.config_data.as_ref()));
        let simulation = simulation(&visitor, model);
        let writable = model.is_none_or(|m| m.access_mode.eq_ignore_ascii_case("ReadWrite"));
        let desired = spec.desired.clone().unwrap_or_default();
        let collect_every = cycle(spec.collect_cycle);
        let report_every = cycle(spec.report_cycle);
        let mut this = match old {
            Some(old) => {
                let changed = old.desired.value != desired.value;
                Self {
                    name: spec.name.clone(),
                    next_collect: old.next_collect.min(now + collect_every),
                    next_report: if changed {
                        now
                    } else {
                        old.next_report.min(now + report_every)
                    },
                    value: old.value,
                    read_at_ms: old.read_at_ms,
                    simulation,
                    writable,
                    desired,
                    collect_every,
                    report_every,
                }
            }
            None => Self {
                name: spec.name.clone(),
                value: simulation.initial(),
                read_at_ms: now_ms(),
                simulation,
                writable,
                desired,
                collect_every,
                report_every,
                next_collect: now,
                next_report: now,
            },
        };
        this.apply_desired();
        this
    }

    /// Writes the desired value to the virtual device, when there is one and it is writable.
    fn apply_desired(&mut self) -> bool {
        if self.writable && !self.desired.value.is_empty() {
            if self.value != self.desired.value {
                tracing::info!(
                    property = self.name,
                    value = self.desired.value,
                    "desired value applied"
                );
            }
            self.value.clone_from(&self.desired.value);
            self.read_at_ms = now_ms();
            true
        } else {
            false
        }
    }

    fn collect(&mut self, rng: &mut impl Rng) {
        if !self.apply_desired() {
            self.value = self.simulation.next(&self.value, rng);
            self.read_at_ms = now_ms();
        }
    }

    fn twin(&self) -> Twin {
        let kind = self.simulation.data_type.as_str().to_owned();
        let mut observed = self.desired.clone();
        observed
            .metadata
            .entry("type".to_owned())
            .or_insert_with(|| kind.clone());
        Twin {
            property_name: self.name.clone(),
            observed_desired: Some(observed),
            reported: Some(TwinProperty {
                value: self.value.clone(),
                metadata: HashMap::from([
                    ("timestamp".to_owned(), self.read_at_ms.to_string()),
                    ("type".to_owned(), kind),
                ]),
            }),
        }
    }
}

/// The simulation of a property: visitor `configData` first, then the model property.
fn simulation(visitor: &ConfigData, model: Option<&ModelProperty>) -> Simulation {
    let number = |keys: [&str; 2]| keys.iter().find_map(|k| visitor.get(*k)?.as_f64());
    let model_number = |text: Option<&String>| text.and_then(|t| t.trim().parse::<f64>().ok());
    let data_type = visitor
        .get("dataType")
        .and_then(|v| DataType::parse(&v.as_text()))
        .or_else(|| model.and_then(|m| DataType::parse(&m.r#type)))
        .unwrap_or(DataType::Int);
    let min = number(["minValue", "min"])
        .or_else(|| model_number(model.map(|m| &m.minimum)))
        .unwrap_or(0.0);
    let max = number(["maxValue", "max"])
        .or_else(|| model_number(model.map(|m| &m.maximum)))
        .unwrap_or(100.0);
    let step = number(["step", "step"]);
    Simulation::new(data_type, min, max, step)
}

/// A DMI cycle in milliseconds as a duration; 0 or less is [`DEFAULT_CYCLE`].
pub fn cycle(ms: i64) -> Duration {
    u64::try_from(ms)
        .ok()
        .filter(|ms| *ms > 0)
        .map_or(DEFAULT_CYCLE, Duration::from_millis)
}

/// The next instant of a schedule that was due at `due`: one cycle later, or a cycle after
/// `now` when that is already past.
fn advance(due: Instant, every: Duration, now: Instant) -> Instant {
    let next = due + every;
    if next <= now { now + every } else { next }
}

/// Milliseconds since the Unix epoch (the twins' `metadata.timestamp`).
pub fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

#[cfg(test)]
mod tests;
