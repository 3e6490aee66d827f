#![no_main]
//! See `acp_fuzz::typed_decode` for what this target checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| acp_fuzz::typed_decode(data));
