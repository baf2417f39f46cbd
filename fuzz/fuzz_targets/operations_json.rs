//! libFuzzer entry point of target `operations_json`: see `verge_fuzz::operations`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| verge_fuzz::operations::check(data));
