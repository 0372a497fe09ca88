//! What a caller is granted: one permit taken from the limiter.

use super::partitions::PartitionId;

/// One permit taken from the limiter: whose it is, what was in flight and the limit when it was
/// taken, and when (on the limiter's clock) its round trip started.
#[derive(Debug, Clone, Copy)]
pub(super) struct Grant {
    /// The partition the permit counts against.
    pub(super) partition: PartitionId,
    /// Permits in flight once this one was taken, counting it.
    pub(super) in_flight: usize,
    /// The limit it was checked against.
    pub(super) limit: usize,
    /// Grant time on the limiter's clock, in nanoseconds.
    pub(super) start_nanos: u64,
}
