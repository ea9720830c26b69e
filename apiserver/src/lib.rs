//! An embedded, in-memory Kubernetes API server for development and tests.
//!
//! It speaks enough of the real REST + watch protocol (discovery, CRUD, CRDs, server-side
//! apply, admission webhooks) for kube-rs clients and `kubectl` to work against it unchanged.
//! See `README.md` for what is and is not supported.
//!
//! The public surface: [`ApiServer::start`] with a [`Config`] gives a [`RunningApiServer`];
//! [`spawn_workload_controller`] plays the Deployment controller and the kubelet (`btp-manager local`
//! runs it). Test support (fault injection, the request log, a Deployment stand-in that only marks
//! Deployments available) is the `testing` module, behind the `testing` feature.
//!
//! This file only declares modules and re-exports: every module names the module that defines what it
//! uses, never the crate root (the workspace's `tests/imports.rs` keeps the modules free of import circles).

mod access;
mod admission;
mod authz;
mod config;
mod context;
mod error;
mod events;
#[cfg(feature = "testing")]
mod faults;
mod handle;
mod handlers;
mod patch;
mod proto;
mod registry;
mod render;
mod request;
mod schema;
mod selectors;
mod server;
mod ssa;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod tls;
mod util;
mod watch;
mod webhook_client;
mod workloads;

pub use config::{Config, KubeVersion};
pub use error::Error;
pub use handle::RunningApiServer;
pub use server::{ApiServer, StartFuture};
pub use workloads::spawn_workload_controller;
