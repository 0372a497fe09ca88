#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
#![deny(unsafe_code)]
// On docs.rs, mark every item that needs a feature with that feature.
#![cfg_attr(docsrs, feature(doc_cfg))]
// The docs are written for the all-features build docs.rs makes, where every link resolves;
// built without `redis`, links from the store-independent modules to the Redis store dangle.
#![cfg_attr(not(feature = "redis"), allow(rustdoc::broken_intra_doc_links))]

pub mod backoff;
pub mod clock;
pub mod gcra;
mod guard;
pub mod headers;
pub mod vegas;

#[cfg(feature = "tower")]
pub use guard::QuotaLayerError;
pub use guard::{AdmitError, BuildError, Guard, GuardBuilder, GuardError, NoRateLimit};
#[cfg(feature = "redis")]
pub use guard::{RedisTarget, RedisUrlError};
