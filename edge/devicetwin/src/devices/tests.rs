use serde_json::json;

use super::*;

fn stored(uid: &str, rv: &str, value: serde_json::Value) -> StoredObject {
    StoredObject {
        uid: uid.into(),
        resource_version: rv.into(),
        content: serde_json::to_vec(&value).expect("json"),
    }
}

#[test]
fn the_cache_follows_store_events_and_skips_bad_objects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = MetaStore::open(&dir.path().join("e.redb")).expect("open");
    let key = ResourceKey::new("ns", ResourceType::Device, "d1");
    let device = json!({"metadata": {"name": "d1"}, "spec": {
        "protocol": {"protocolName": "virtual"},
        "stateReport": {"reportToCloud": true, "reportCycle": 5000}}});
    let o = stored("u1", "3", device);
    store
        .upsert_if_newer(&key, &o.uid, &o.resource_version, &o.content)
        .expect("store");
    let bad = ResourceKey::new("ns", ResourceType::Device, "bad");
    store
        .upsert_if_newer(&bad, "u2", "1", b"[1,2]")
        .expect("store");
    let cache = DeviceCache::default();
    cache.relist(&store).expect("relist");
    let id = DeviceId::new("ns", "d1");
    let d = cache.device(&id).expect("held");
    assert_eq!(d.device.namespace(), "ns", "the key's namespace");
    assert_eq!(d.protocol(), "virtual");
    assert_eq!(
        d.state_report,
        StateReport {
            report_to_cloud: true,
            report_cycle: 5000
        }
    );
    assert!(cache.device(&DeviceId::new("ns", "bad")).is_none());

    store.delete(&key, "u1").expect("delete");
    let change = cache
        .apply(
            &store,
            &StoreEvent {
                key,
                uid: "u1".into(),
                applied: Applied::Deleted,
                trace: Default::default(),
            },
        )
        .expect("apply");
    assert_eq!(change, Some(Change::Device(id.clone())));
    assert!(cache.device(&id).is_none());
}

#[test]
fn ids_parse_strictly() {
    assert_eq!(DeviceId::parse("a/b"), Some(DeviceId::new("a", "b")));
    for bad in ["", "a", "/b", "a/", "a/b/c"] {
        assert_eq!(DeviceId::parse(bad), None, "{bad:?}");
    }
}
