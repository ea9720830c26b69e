//! Runtime configuration (docs/behaviour.md#configuration, docs/configuration.md).
//!
//! - [`keys`]: the configuration ([`Config`]) and its keys, written once ([`KEYS`]): flags, environment
//!   variables, runtime ConfigMap keys, defaults, when a change applies, parsers;
//! - [`doc`]: the tables of docs/configuration.md, from the keys;
//! - [`settings`]: [`Settings`], one immutable snapshot of the configuration and the manifests it names;
//! - [`runtime`]: the runtime ConfigMap on top of the flags, as the manager starts and while it runs;
//! - [`duration`]: Go durations.

pub mod doc;
pub mod duration;
pub mod keys;
pub mod runtime;
pub mod settings;

pub use duration::parse_go_duration;
pub use keys::{configmap_key, configmap_keys, Applies, Config, ConfigProblem, Field, Key, KEYS};
pub use runtime::Follower;
pub use settings::Settings;
