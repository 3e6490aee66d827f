//! Generated ACP types.
