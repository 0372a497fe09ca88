//! `tracing` spans: quota decisions (the inbound layer's and `Guard::admit`'s) and retry attempts.
//!
//! A binary of their own, where every test installs its subscriber before it reaches a call site:
//! `tracing` caches per call site whether anyone listens, and a test of another binary reaching
//! the call site on another thread with no subscriber could cache "no one".

mod attempts;
mod peer_address;
mod quota;
