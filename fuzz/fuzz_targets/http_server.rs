#![no_main]
//! See `acp_fuzz::http_server` (fuzz/src/http.rs) for what this target checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| acp_fuzz::http_server(data));
