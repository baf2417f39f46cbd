//! libFuzzer entry point of target `websocket_frames`: see `verge_fuzz::websocket`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| verge_fuzz::websocket::check(data));
