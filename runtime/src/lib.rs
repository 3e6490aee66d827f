//! Agent Client Protocol runtime.
