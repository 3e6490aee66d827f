//! The ACP toolchain's maintenance commands, as a library: the code generator
//! ([`codegen`]) and the pinned-schema handling ([`schema`]). `main.rs` is the CLI over them.

pub mod codegen;
pub mod diff;
pub mod releases;
pub mod schema;
pub mod soak;
