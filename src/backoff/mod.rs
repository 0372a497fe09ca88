//! Decorrelated-jitter backoff, `Retry-After` parsing, retry loop and retry budget.
