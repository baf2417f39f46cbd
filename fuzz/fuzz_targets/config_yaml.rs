//! libFuzzer entry point of target `config_yaml`: see `verge_fuzz::config`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| verge_fuzz::config::check(data));
