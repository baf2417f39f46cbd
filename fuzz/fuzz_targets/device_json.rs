//! libFuzzer entry point of target `device_json`: see `verge_fuzz::device`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| verge_fuzz::device::check(data));
