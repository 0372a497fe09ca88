//! Overload protection for services, behind one [`Guard`]:
//!
//! * **Perimeter quotas**: exact GCRA rate limiting, one integer of state per key, in memory or
//!   shared through Redis and Redis Cluster.
//! * **Adaptive concurrency**: a Vegas limiter sizes the outbound calls in flight from measured
//!   round-trip times.
//! * **Polite clients**: decorrelated-jitter retries that honour `Retry-After`, within a budget.
//!
//! ```
//! use flowguard::Guard;
//! use flowguard::backoff::{Classification, RetryPolicy};
//! use flowguard::gcra::Quota;
//!
//! #[tokio::main(flavor = "current_thread")]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let guard = Guard::builder()
//!         .quota(Quota::per_minute(600)?.with_burst(20)?) // in memory unless .redis(url)
//!         .retry(RetryPolicy::builder().max_attempts(3).build()?)
//!         .build()
//!         .await?;
//!
//!     // Inbound: a denied decision is an HTTP 429.
//!     assert!(guard.admit(b"api-key-1").await?.allowed);
//!
//!     // Outbound: under the Vegas limit, retried politely.
//!     let body = guard
//!         .call(
//!             |_attempt| async { Ok::<_, std::io::Error>("pong") },
//!             |outcome| match outcome {
//!                 Ok(_) => Classification::NotRetryable,
//!                 Err(_) => Classification::Retryable { retry_after: None },
//!             },
//!         )
//!         .await?;
//!     assert_eq!(body, "pong");
//!     Ok(())
//! }
//! ```
//!
//! | where | what |
//! |---|---|
//! | [`Guard`] | the three protections behind one builder; hands out the layers |
//! | [`gcra`] | quotas: [`Quota`](gcra::Quota), in-memory limiters, [`remote`](gcra::remote) stores, [`two_tier`](gcra::two_tier) |
//! | [`gcra::redis`] | the Redis and Redis Cluster store (feature `redis`) |
//! | [`gcra::layer`] | the inbound HTTP quota layer (feature `tower`) |
//! | [`vegas`] | adaptive concurrency: permits, algorithms, outbound layer and middleware |
//! | [`backoff`] | backoff sequences, the retry engine, retry budgets, HTTP retries |
//! | [`headers`] | the rate-limit HTTP fields, written and read by the same code |
//! | [`clock`] | real and manual clocks |
//!
//! | feature | adds |
//! |---|---|
//! | (default) | in-memory quotas, Vegas, backoff, `Guard`, on `tokio` |
//! | `redis` | the Redis / Redis Cluster store; `GuardBuilder::redis(url)` |
//! | `redis-tls` | `rediss://` URLs (rustls; no system OpenSSL) |
//! | `tower` | the inbound quota layer, the outbound concurrency layer, the retry policy |
//! | `axum` | `PeerIpKey` reads axum's `ConnectInfo` (implies `tower`) |
//! | `reqwest` | concurrency and retry middleware; `Guard::reqwest_client` |
//! | `rls` | the `flowguard-rls` Envoy rate limit service (implies `redis`) |
//!
//! Guides: [the `Guard`](guide::guard), [quotas](guide::quotas), [Redis](guide::redis),
//! [HTTP](guide::http), [Vegas](guide::vegas), [retries](guide::retries),
//! [architecture](guide::architecture). Measurements are in the repository's
//! `docs/PERFORMANCE.md`.
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

/// The guides: the depth behind the front page, one per concern. They are the markdown files
/// under `docs/` in the repository, rendered here; their examples run as doctests.
#[cfg(any(doc, doctest))]
pub mod guide {
    // Each guide links the others as `[name]: other.md`, which works on a repository browser.
    // The definitions written first win in markdown, so these point rustdoc at the modules.
    macro_rules! guide {
        ($(#[$cfg:meta])* $name:ident, $file:literal) => {
            $(#[$cfg])*
            #[doc = "[quotas]: crate::guide::quotas"]
            #[doc = "[redis]: crate::guide::redis"]
            #[doc = "[http]: crate::guide::http"]
            #[doc = "[vegas]: crate::guide::vegas"]
            #[doc = "[retries]: crate::guide::retries"]
            #[doc = "[guard]: crate::guide::guard"]
            #[doc = ""]
            #[doc = include_str!($file)]
            pub mod $name {}
        };
    }

    guide!(guard, "../docs/guard.md");
    guide!(quotas, "../docs/quotas.md");
    guide!(
        #[cfg(any(doc, feature = "redis"))]
        redis,
        "../docs/redis.md"
    );
    guide!(
        #[cfg(any(doc, all(feature = "axum", feature = "reqwest")))]
        http,
        "../docs/http.md"
    );
    guide!(vegas, "../docs/vegas.md");
    guide!(retries, "../docs/retries.md");
    guide!(architecture, "../docs/architecture.md");

    /// The README's examples, run as doctests.
    #[cfg(doctest)]
    #[doc = include_str!("../README.md")]
    pub mod readme {}
}
