//! `spec.properties[].pushMethod` (kept as written in the Device) as the DMI `PushMethod`.
//!
//! KubeEdge converts the CRD into the protobuf structs by a JSON round trip through Go's
//! `encoding/json`, which matches keys case-insensitively: the CRD's `hostName`,
//! `requestPath`, `TDEngine`, `dbName` fill the protobuf's `hostname`, `requestpath`,
//! `tdengine`, `dbname`. Keys are matched the same way here. Missing or mistyped fields are
//! left at their defaults (a push target is the mapper's business, not a reason to refuse
//! the device).

use serde_json::{Map, Value};
use verge_proto::dmi::v1beta1 as dmi;

use super::convert::any;

/// The DMI `PushMethod` of a Device property's `pushMethod`.
pub fn push_method(value: &Value) -> dmi::PushMethod {
    let Some(push) = value.as_object() else {
        return dmi::PushMethod::default();
    };
    dmi::PushMethod {
        http: object(push, "http").map(|o| dmi::PushMethodHttp {
            hostname: text(o, "hostname"),
            port: int(o, "port"),
            requestpath: text(o, "requestpath"),
            timeout: int(o, "timeout"),
        }),
        mqtt: object(push, "mqtt").map(|o| dmi::PushMethodMqtt {
            address: text(o, "address"),
            topic: text(o, "topic"),
            qos: i32::try_from(int(o, "qos")).unwrap_or_default(),
            retained: flag(o, "retained"),
        }),
        db_method: object(push, "dbMethod").map(db_method),
        otel: object(push, "otel").map(|o| dmi::PushMethodOtel {
            endpoint_url: text(o, "endpointURL"),
        }),
        anomaly_detection: object(push, "anomalyDetection").map(|o| dmi::AnomalyDetection {
            data: o
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), any(v).ok()??)))
                .collect(),
        }),
    }
}

fn db_method(db: &Map<String, Value>) -> dmi::DbMethod {
    dmi::DbMethod {
        influxdb2: object(db, "influxdb2").map(|o| dmi::DbMethodInfluxdb2 {
            influxdb2_client_config: object(o, "influxdb2ClientConfig").map(|c| {
                dmi::Influxdb2ClientConfig {
                    url: text(c, "url"),
                    org: text(c, "org"),
                    bucket: text(c, "bucket"),
                }
            }),
            influxdb2_data_config: object(o, "influxdb2DataConfig").map(|c| {
                dmi::Influxdb2DataConfig {
                    measurement: text(c, "measurement"),
                    tag: object(c, "tag")
                        .map(|t| {
                            t.iter()
                                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                                .collect()
                        })
                        .unwrap_or_default(),
                    field_key: text(c, "fieldKey"),
                }
            }),
        }),
        redis: object(db, "redis").map(|o| dmi::DbMethodRedis {
            redis_client_config: object(o, "redisClientConfig").map(|c| dmi::RedisClientConfig {
                addr: text(c, "addr"),
                db: small(c, "db"),
                poolsize: small(c, "poolsize"),
                min_idle_conns: small(c, "minIdleConns"),
            }),
        }),
        tdengine: object(db, "tdengine").map(|o| dmi::DbMethodTdEngine {
            td_engine_client_config: object(o, "tdEngineClientConfig").map(|c| {
                dmi::TdEngineClientConfig {
                    addr: text(c, "addr"),
                    dbname: text(c, "dbname"),
                }
            }),
        }),
        mysql: object(db, "mysql").map(|o| dmi::DbMethodMySql {
            mysql_client_config: object(o, "mysqlClientConfig").map(|c| dmi::MySqlClientConfig {
                addr: text(c, "addr"),
                database: text(c, "database"),
                user_name: text(c, "userName"),
            }),
        }),
    }
}

/// The value of `key` in `map`, matched ignoring ASCII case (Go's `encoding/json`).
fn field<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key).or_else(|| {
        map.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    })
}

fn object<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Map<String, Value>> {
    field(map, key)?.as_object()
}

fn text(map: &Map<String, Value>, key: &str) -> String {
    field(map, key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn int(map: &Map<String, Value>, key: &str) -> i64 {
    field(map, key).and_then(Value::as_i64).unwrap_or_default()
}

fn small(map: &Map<String, Value>, key: &str) -> i32 {
    i32::try_from(int(map, key)).unwrap_or_default()
}

fn flag(map: &Map<String, Value>, key: &str) -> bool {
    field(map, key).and_then(Value::as_bool).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn crd_spellings_fill_the_protobuf_fields() {
        let p = push_method(&json!({
            "http": {"hostName": "h", "port": 8080, "requestPath": "/p", "timeout": 3},
            "mqtt": {"address": "tcp://b:1883", "topic": "t", "qos": 1, "retained": true},
            "dbMethod": {
                "TDEngine": {"TDEngineClientConfig": {"addr": "a:6041", "dbName": "d"}},
                "influxdb2": {"influxdb2DataConfig": {"tag": {"k": "v"}, "fieldKey": "f"}}
            },
            "anomalyDetection": {"threshold": 3, "nested": {"x": 1}}
        }));
        let http = p.http.expect("http");
        assert_eq!(
            (http.hostname.as_str(), http.port, http.requestpath.as_str()),
            ("h", 8080, "/p")
        );
        let mqtt = p.mqtt.expect("mqtt");
        assert_eq!((mqtt.qos, mqtt.retained), (1, true));
        let db = p.db_method.expect("db");
        let td = db
            .tdengine
            .and_then(|t| t.td_engine_client_config)
            .expect("td");
        assert_eq!((td.addr.as_str(), td.dbname.as_str()), ("a:6041", "d"));
        let influx = db
            .influxdb2
            .and_then(|i| i.influxdb2_data_config)
            .expect("influx");
        assert_eq!(influx.tag["k"], "v");
        let anomaly = p.anomaly_detection.expect("anomaly");
        assert_eq!(anomaly.data.len(), 1, "nested values are left out");
        assert_eq!(push_method(&json!("nonsense")), dmi::PushMethod::default());
    }
}
