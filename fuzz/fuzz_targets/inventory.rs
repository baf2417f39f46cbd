//! libFuzzer entry point of target `inventory`: see `verge_fuzz::inventory`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| verge_fuzz::inventory::check(data));
