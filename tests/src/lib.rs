//! Cross-crate tests live in `tests/tests/`. The README's examples are compiled and run here
//! as doctests, so the README cannot drift from the code.
#![doc = include_str!("../../README.md")]
