//! libFuzzer entry point of target `message_decode`: see `verge_fuzz::message`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| verge_fuzz::message::check(data));
