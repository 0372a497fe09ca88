//! Code shared by the harness binaries and their tests. Not part of the published crate.

pub mod cli;
pub mod fairness;
pub mod naive;
pub mod overload;
