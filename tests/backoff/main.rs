//! Retries (`flowguard::backoff`): jitter sequences, the retry loop and budget, `Retry-After` and
//! rate-limit headers, retries over HTTP with tower and reqwest.
//!
//! One test binary per module of the crate, one file per concern.

mod headers;
mod http_retries;
mod jitter;
mod retry;
mod tower_retries;
