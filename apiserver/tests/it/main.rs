//! Integration tests for the embedded API server, driven with real kube clients over HTTPS.

mod admission;
mod corpus;
mod common;
mod crud;
mod discovery;
mod faults;
mod kubectl;
mod ssa;
mod watch;
