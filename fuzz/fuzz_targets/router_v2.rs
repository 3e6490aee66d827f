#![no_main]
//! See `acp_fuzz::router_v2` for what this target checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| acp_fuzz::router_v2(data));
