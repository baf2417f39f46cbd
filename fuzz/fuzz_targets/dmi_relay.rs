//! libFuzzer entry point of target `dmi_relay`: see `verge_fuzz::relay`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| verge_fuzz::relay::check(data));
