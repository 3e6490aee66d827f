//! Agent Client Protocol macros (see the README).
