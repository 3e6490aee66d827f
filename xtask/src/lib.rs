//! The ACP toolchain's maintenance commands, as a library: the code generator
//! ([`codegen`]), the pinned-schema handling ([`schema`]), the schema and API change reports
//! ([`diff`], [`semver`]), the book's link check ([`book`]). `main.rs` is the CLI over them.

#![deny(missing_docs)]

pub mod book;
pub mod codegen;
pub mod diff;
pub mod layers;
pub mod releases;
pub mod schema;
pub mod semver;
pub mod soak;
