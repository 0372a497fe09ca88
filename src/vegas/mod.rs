//! Vegas-style adaptive concurrency limiting.
