//! Partitions: named shares of the limit with guaranteed minimums.
//!
//! Each partition is guaranteed `floor(share * limit)` permits: while it holds fewer, it is served
//! before any partition that is borrowing, both on `try_acquire` and when queued waiters are
//! granted. Capacity nobody else is waiting for may be borrowed by any partition, so an idle
//! partition's share is not wasted. Borrowed permits are never revoked: a partition below its
//! guarantee gets the next permits that complete. The total never exceeds the limit.
//!
//! Calls made without a partition use the implicit `"default"` partition, whose share is what the
//! declared partitions leave (1 minus their sum).

use crate::vegas::error::ConfigError;

/// Name of the implicit partition used by calls that name none.
pub const DEFAULT_PARTITION: &str = "default";

/// Handle to a partition of a [`Limiter`](super::Limiter), from
/// [`Limiter::partition`](super::Limiter::partition); partitions are declared with
/// [`LimiterBuilder::partition`](super::LimiterBuilder::partition).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PartitionId(usize);

impl PartitionId {
    /// The implicit default partition.
    pub const DEFAULT: PartitionId = PartitionId(0);
}

/// Partition names, shares and permits held.
#[derive(Debug, Clone)]
pub(crate) struct Partitions {
    names: Vec<String>,
    shares: Vec<f64>,
    in_flight: Vec<usize>,
}

impl Partitions {
    /// Validates declared `(name, share)` pairs and adds the implicit default partition first.
    pub(crate) fn new(declared: &[(String, f64)]) -> Result<Self, ConfigError> {
        let mut names = vec![DEFAULT_PARTITION.to_owned()];
        let mut shares = vec![0.0];
        for (name, share) in declared {
            if !(share.is_finite() && *share > 0.0 && *share <= 1.0) {
                return Err(ConfigError::OutOfRange {
                    field: "partition share",
                    value: *share,
                    allowed: "in (0, 1]",
                });
            }
            if names.iter().any(|known| known == name) {
                return Err(ConfigError::DuplicatePartition { name: name.clone() });
            }
            names.push(name.clone());
            shares.push(*share);
        }
        let total: f64 = shares.iter().sum();
        // Tolerate rounding in shares such as 0.1 * 10.
        if total > 1.0 + 1e-9 {
            return Err(ConfigError::SharesExceedOne { total });
        }
        shares[0] = (1.0 - total).max(0.0);
        let in_flight = vec![0; names.len()];
        Ok(Self {
            names,
            shares,
            in_flight,
        })
    }

    /// Whether partitions were declared besides the implicit default. Only then do guarantees
    /// arbitrate grants and are permits counted per partition; otherwise the default partition
    /// holds every permit.
    pub(crate) fn declared(&self) -> bool {
        self.names.len() > 1
    }

    /// Looks a partition up by name.
    pub(crate) fn find(&self, name: &str) -> Option<PartitionId> {
        self.names
            .iter()
            .position(|known| known == name)
            .map(PartitionId)
    }

    /// Permits guaranteed to `partition` under `limit`.
    pub(crate) fn guaranteed(&self, partition: PartitionId, limit: usize) -> usize {
        let share = self.shares.get(partition.0).copied().unwrap_or(0.0);
        // The epsilon absorbs rounding in shares such as 1 - 0.8.
        (share * limit as f64 + 1e-9).floor() as usize
    }

    /// Whether `partition` holds fewer permits than it is guaranteed under `limit`.
    pub(crate) fn below_guarantee(&self, partition: PartitionId, limit: usize) -> bool {
        self.held(partition) < self.guaranteed(partition, limit)
    }

    /// Permits `partition` holds.
    pub(crate) fn held(&self, partition: PartitionId) -> usize {
        self.in_flight.get(partition.0).copied().unwrap_or(0)
    }

    /// Records a permit granted to `partition`.
    pub(crate) fn take(&mut self, partition: PartitionId) {
        if let Some(held) = self.in_flight.get_mut(partition.0) {
            *held += 1;
        }
    }

    /// Records a permit of `partition` released.
    pub(crate) fn give_back(&mut self, partition: PartitionId) {
        if let Some(held) = self.in_flight.get_mut(partition.0) {
            *held = held.saturating_sub(1);
        }
    }

    /// `(name, held)` for every partition, default first; `in_flight` is what the default
    /// partition holds when none is declared.
    pub(crate) fn summary(&self, in_flight: usize) -> Vec<(String, usize)> {
        if !self.declared() {
            return vec![(DEFAULT_PARTITION.to_owned(), in_flight)];
        }
        self.names
            .iter()
            .cloned()
            .zip(self.in_flight.iter().copied())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared(pairs: &[(&str, f64)]) -> Vec<(String, f64)> {
        pairs.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect()
    }

    #[test]
    fn default_partition_gets_what_is_left() {
        let parts = Partitions::new(&declared(&[("live", 0.6), ("batch", 0.2)])).unwrap();
        assert_eq!(parts.find("default"), Some(PartitionId::DEFAULT));
        assert_eq!(parts.guaranteed(PartitionId::DEFAULT, 10), 2);
        assert_eq!(parts.guaranteed(parts.find("live").unwrap(), 10), 6);
        assert_eq!(parts.find("nope"), None);
    }

    #[test]
    fn bad_declarations_are_typed_errors() {
        assert!(matches!(
            Partitions::new(&declared(&[("a", 0.7), ("b", 0.7)])),
            Err(ConfigError::SharesExceedOne { .. })
        ));
        assert!(matches!(
            Partitions::new(&declared(&[("a", 0.2), ("a", 0.2)])),
            Err(ConfigError::DuplicatePartition { .. })
        ));
        assert!(matches!(
            Partitions::new(&declared(&[("a", 0.0)])),
            Err(ConfigError::OutOfRange { .. })
        ));
        assert!(matches!(
            Partitions::new(&declared(&[("default", 0.5)])),
            Err(ConfigError::DuplicatePartition { .. })
        ));
    }
}
