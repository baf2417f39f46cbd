//! Target `mqtt_payload`: an MQTT topic and payload as an edge app publishes them → the
//! eventbus's topic parser and request decoders (KubeEdge's `$hw/events/...` JSON).
//!
//! Input layout: the topic up to the first `\n`, the payload after it.
//!
//! Properties: nothing panics; a decoded twin update either passes or fails
//! `check_twin_update` with a result code the eventbus answers with (400 or 404); a refused
//! payload's error has such a code too.

use verge_edgecore::eventbus::{check_twin_update, state_update, topic::Request, twin_update};

/// Splits `data` into topic and payload and decodes both.
pub fn check(data: &[u8]) {
    let (topic, payload) = match data.iter().position(|b| *b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    if let Ok(topic) = std::str::from_utf8(topic) {
        let _ = Request::parse(topic);
    }
    match twin_update(payload) {
        Ok(update) => {
            if let Err(error) = check_twin_update(&update) {
                assert!(matches!(error.code(), 400 | 404), "code {}", error.code());
            }
        }
        Err(error) => assert!(matches!(error.code(), 400 | 404), "code {}", error.code()),
    }
    let _ = state_update(payload);
}
