//! libFuzzer entry point of target `mqtt_payload`: see `verge_fuzz::mqtt`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| verge_fuzz::mqtt::check(data));
