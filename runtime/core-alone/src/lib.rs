//! `runtime/src/core` (acp-rpc's core floor) as a crate of its own, with none of the layers
//! above it: if the core ever names one of them, this crate stops compiling. The layering check
//! (`cargo xtask layers`) says the same from the module graph; this says it with the compiler.
//! Not published; `.ci/run` builds it with and without the core's features.

// The core's crate-internal API is for the layers above it, which are not here.
#![allow(dead_code, unused_imports)]
// Its docs link to those layers; rustdoc does not run on this crate.
#![allow(rustdoc::broken_intra_doc_links)]

#[path = "../../src/core/mod.rs"]
pub mod core;
