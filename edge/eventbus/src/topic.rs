//! KubeEdge's device topics: the requests edge applications publish, the answers edgecore
//! publishes, and the subscriptions that catch the requests.
//!
//! Since KubeEdge v1.15 (v1beta1 devices) a device is named by two topic levels,
//! `<namespace>/<name>`: `$hw/events/device/default/thermometer/twin/update`. Topics of the
//! older one-level form (`$hw/events/device/<name>/...`) match no subscription, as in KubeEdge.

use super::DeviceRef;

/// The common prefix of device topics.
pub const DEVICE_PREFIX: &str = "$hw/events/device/";

/// The common prefix of node topics.
pub const NODE_PREFIX: &str = "$hw/events/node/";

/// The topic filters edgecore subscribes to: twin update and get, state update, and
/// membership get. (`twin/+` also matches KubeEdge's `twin/cloud_updated`, which
/// [`Request::parse`] ignores: only the cloud may change desired values.)
pub const SUBSCRIPTIONS: [&str; 3] = [
    "$hw/events/device/+/+/twin/+",
    "$hw/events/device/+/+/state/update",
    "$hw/events/node/+/membership/get",
];

/// A request an edge application published, identified by its topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `$hw/events/device/<ns>/<name>/twin/update`: report actual and/or expected values.
    TwinUpdate(DeviceRef),
    /// `$hw/events/device/<ns>/<name>/twin/get`: read every twin of the device.
    TwinGet(DeviceRef),
    /// `$hw/events/device/<ns>/<name>/state/update`: set the device's state.
    StateUpdate(DeviceRef),
    /// `$hw/events/node/<node>/membership/get`: list the node's devices (answered on
    /// edgecore's own node name, whatever node the topic names).
    MembershipGet,
}

impl Request {
    /// The request published on `topic`, or `None` for a topic that is none of the above
    /// (e.g. `twin/cloud_updated`, or a device level missing).
    pub fn parse(topic: &str) -> Option<Self> {
        if let Some(rest) = topic.strip_prefix(NODE_PREFIX) {
            let (node, action) = rest.split_once('/')?;
            return (!node.contains('/') && action == "membership/get")
                .then_some(Self::MembershipGet);
        }
        let rest = topic.strip_prefix(DEVICE_PREFIX)?;
        let mut levels = rest.splitn(3, '/');
        let namespace = levels.next()?;
        let name = levels.next()?;
        let action = levels.next()?;
        let device = DeviceRef::new(namespace, name);
        match action {
            "twin/update" => Some(Self::TwinUpdate(device)),
            "twin/get" => Some(Self::TwinGet(device)),
            "state/update" => Some(Self::StateUpdate(device)),
            _ => None,
        }
    }

    /// Where the answer (or the error result) of this request goes: `<request topic>/result`
    /// (membership on `node_name`).
    pub fn result_topic(&self, node_name: &str) -> String {
        match self {
            Self::TwinUpdate(device) => Answer::TwinUpdateResult.topic(device),
            Self::TwinGet(device) => Answer::TwinGetResult.topic(device),
            Self::StateUpdate(device) => Answer::StateUpdateResult.topic(device),
            Self::MembershipGet => membership_topic(node_name, "membership/get/result"),
        }
    }
}

/// A device topic edgecore publishes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// `.../twin/update/result`: the outcome of a twin update (or its error).
    TwinUpdateResult,
    /// `.../twin/update/delta`: the twins whose expected value differs from the actual one.
    TwinUpdateDelta,
    /// `.../twin/update/document`: each changed twin before and after.
    TwinUpdateDocument,
    /// `.../twin/get/result`: every twin of the device (or an error).
    TwinGetResult,
    /// `.../state/update/result`: the device's new state.
    StateUpdateResult,
}

impl Answer {
    /// The suffix after `$hw/events/device/<ns>/<name>/`.
    pub fn suffix(self) -> &'static str {
        match self {
            Self::TwinUpdateResult => "twin/update/result",
            Self::TwinUpdateDelta => "twin/update/delta",
            Self::TwinUpdateDocument => "twin/update/document",
            Self::TwinGetResult => "twin/get/result",
            Self::StateUpdateResult => "state/update/result",
        }
    }

    /// The topic for `device`: `$hw/events/device/<ns>/<name>/<suffix>`.
    pub fn topic(self, device: &DeviceRef) -> String {
        format!(
            "{DEVICE_PREFIX}{}/{}/{}",
            device.namespace,
            device.name,
            self.suffix()
        )
    }
}

/// `$hw/events/node/<node>/membership/updated`: devices added to or removed from the node.
pub fn membership_updated_topic(node_name: &str) -> String {
    membership_topic(node_name, "membership/updated")
}

fn membership_topic(node_name: &str, suffix: &str) -> String {
    format!("{NODE_PREFIX}{node_name}/{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(ns: &str, name: &str) -> DeviceRef {
        DeviceRef::new(ns, name)
    }

    #[test]
    fn device_requests_parse_namespace_and_name() {
        let cases = [
            (
                "$hw/events/device/default/thermo/twin/update",
                Request::TwinUpdate(dev("default", "thermo")),
            ),
            (
                "$hw/events/device/ns-1/d.1/twin/get",
                Request::TwinGet(dev("ns-1", "d.1")),
            ),
            (
                "$hw/events/device/default/thermo/state/update",
                Request::StateUpdate(dev("default", "thermo")),
            ),
            (
                "$hw/events/node/edge-1/membership/get",
                Request::MembershipGet,
            ),
        ];
        for (topic, want) in cases {
            assert_eq!(Request::parse(topic), Some(want), "{topic}");
        }
    }

    #[test]
    fn other_topics_are_not_requests() {
        for topic in [
            "$hw/events/device/thermo/twin/update",
            "$hw/events/device/default/thermo/twin/cloud_updated",
            "$hw/events/device/default/thermo/twin/update/result",
            "$hw/events/device/default/thermo/twin/update/delta",
            "$hw/events/device/default/thermo/state/get",
            "$hw/events/device/default",
            "$hw/events/node/edge-1/membership/detail",
            "$hw/events/node/a/b/membership/get",
            "$hw/events/upload/x",
            "SYS/dis/upload_records",
            "",
        ] {
            assert_eq!(Request::parse(topic), None, "{topic}");
        }
    }

    #[test]
    fn answers_go_to_the_device_topics() {
        let d = dev("default", "thermo");
        assert_eq!(
            Answer::TwinUpdateDelta.topic(&d),
            "$hw/events/device/default/thermo/twin/update/delta"
        );
        assert_eq!(
            Answer::TwinUpdateDocument.topic(&d),
            "$hw/events/device/default/thermo/twin/update/document"
        );
        assert_eq!(
            Request::TwinUpdate(d.clone()).result_topic("n"),
            "$hw/events/device/default/thermo/twin/update/result"
        );
        assert_eq!(
            Request::TwinGet(d.clone()).result_topic("n"),
            "$hw/events/device/default/thermo/twin/get/result"
        );
        assert_eq!(
            Request::StateUpdate(d).result_topic("n"),
            "$hw/events/device/default/thermo/state/update/result"
        );
        assert_eq!(
            Request::MembershipGet.result_topic("edge-1"),
            "$hw/events/node/edge-1/membership/get/result"
        );
        assert_eq!(
            membership_updated_topic("edge-1"),
            "$hw/events/node/edge-1/membership/updated"
        );
    }

    #[test]
    fn subscriptions_match_the_requests_only() {
        // A topic filter match, as the broker does it ('+' one level, no '#').
        fn matches(filter: &str, topic: &str) -> bool {
            let f: Vec<_> = filter.split('/').collect();
            let t: Vec<_> = topic.split('/').collect();
            f.len() == t.len() && f.iter().zip(&t).all(|(f, t)| *f == "+" || f == t)
        }
        let matched = |topic: &str| SUBSCRIPTIONS.iter().any(|f| matches(f, topic));
        assert!(matched("$hw/events/device/default/thermo/twin/update"));
        assert!(matched("$hw/events/device/default/thermo/twin/get"));
        assert!(matched("$hw/events/device/default/thermo/state/update"));
        assert!(matched("$hw/events/node/edge-1/membership/get"));
        let d = dev("default", "thermo");
        for answer in [
            Answer::TwinUpdateResult,
            Answer::TwinUpdateDelta,
            Answer::TwinUpdateDocument,
            Answer::TwinGetResult,
            Answer::StateUpdateResult,
        ] {
            assert!(!matched(&answer.topic(&d)), "{answer:?} would loop back");
        }
    }
}
