#![no_main]
//! See `acp_fuzz::framing_decode` for what this target checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| acp_fuzz::framing_decode(data));
