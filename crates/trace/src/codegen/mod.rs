//! Stub generators.
