//! libFuzzer entry point of target `edgeapp_json`: see `verge_fuzz::edgeapp`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| verge_fuzz::edgeapp::check(data));
