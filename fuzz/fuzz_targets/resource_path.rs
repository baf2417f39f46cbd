//! libFuzzer entry point of target `resource_path`: see `verge_fuzz::path`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| verge_fuzz::path::check(data));
