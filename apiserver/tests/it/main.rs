//! Integration tests for the embedded API server, driven with real kube clients over HTTPS.

mod admission;
mod common;
mod corpus;
mod crud;
mod discovery;
mod faults;
mod kubectl;
mod ssa;
mod watch;
