//! Runtime configuration (docs/behaviour.md#configuration, docs/configuration.md).
//!
//! - [`keys`]: the configuration ([`Config`]) and its keys, written once ([`KEYS`]): flags, environment
//!   variables, runtime ConfigMap keys, defaults, when a change applies, parsers;
//! - [`doc`]: the tables of docs/configuration.md, from the keys;
//! - [`duration`]: Go durations.

pub mod doc;
pub mod duration;
pub mod keys;

pub use duration::parse_go_duration;
pub use keys::{configmap_key, configmap_keys, Applies, Config, ConfigProblem, Field, Key, KEYS};
