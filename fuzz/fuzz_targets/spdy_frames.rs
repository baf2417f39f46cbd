//! libFuzzer entry point of target `spdy_frames`: see `verge_fuzz::spdy`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| verge_fuzz::spdy::check(data));
