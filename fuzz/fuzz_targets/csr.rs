//! libFuzzer entry point of target `csr`: see `verge_fuzz::pki`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| verge_fuzz::pki::check(data));
