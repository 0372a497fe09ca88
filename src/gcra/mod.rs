//! GCRA rate limiting.
