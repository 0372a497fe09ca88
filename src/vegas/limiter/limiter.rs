//! The limiter's handle: hands out permits up to the algorithm's current limit.

use std::sync::Arc;
use std::time::Duration;

use super::partitions::PartitionId;
use super::permit::{OwnedPermit, Permit};
use super::shared::Shared;
use super::stats::LimiterSnapshot;
use super::wait::WaitForPermit;
use crate::vegas::error::AcquireError;

/// An adaptive concurrency limiter: at most `limit` permits are held at once, and the limit
/// follows a [`LimitAlgorithm`](crate::vegas::LimitAlgorithm) fed by every completed permit.
///
/// Cheap to clone (all clones share one limiter), `Send + Sync`. A permit is granted only while
/// fewer than `limit` are held, so in-flight never exceeds the limit; when the limit shrinks
/// below the permits already held, no new permit is granted until enough complete. When the
/// limit grows, queued callers are woken at once.
///
/// Cost: while nobody is queued and no partitions are declared, a grant is one compare-and-swap
/// on a word holding both the count and the limit (no lock); every release takes a short lock to
/// feed its sample to the algorithm and the RTT statistics, and to serve queued callers.
///
/// ```
/// use flowguard::vegas::{Limiter, Vegas};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Limiter::builder(Vegas::new()).build()?;
/// let permit = limiter.acquire(std::time::Duration::from_millis(50)).await?;
/// // ... call the dependency ...
/// permit.success();
/// assert_eq!(limiter.in_flight(), 0);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Limiter {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.fmt(f)
    }
}

impl Limiter {
    /// The handle on a limiter assembled by its builder.
    pub(super) fn from_shared(shared: Shared) -> Self {
        Self {
            shared: Arc::new(shared),
        }
    }

    /// The current limit.
    pub fn limit(&self) -> usize {
        self.shared.limit()
    }

    /// Permits held now.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight()
    }

    /// The partition called `name`, if declared (`"default"` always exists).
    pub fn partition(&self, name: &str) -> Option<PartitionId> {
        self.shared.partition(name)
    }

    /// Takes a permit now, or fails at once with [`AcquireError::Full`]. The permit borrows this
    /// handle; see [`try_acquire_owned`](Self::try_acquire_owned) for one that does not.
    #[inline]
    pub fn try_acquire(&self) -> Result<Permit<'_>, AcquireError> {
        self.try_acquire_in(PartitionId::DEFAULT)
    }

    /// [`try_acquire`](Self::try_acquire), answering a permit that holds its own handle on the
    /// limiter (`'static`: it can be moved into a spawned task).
    pub fn try_acquire_owned(&self) -> Result<OwnedPermit, AcquireError> {
        self.try_acquire().map(Permit::into_owned)
    }

    /// [`try_acquire`](Self::try_acquire) on behalf of `partition`.
    #[inline]
    pub fn try_acquire_in(&self, partition: PartitionId) -> Result<Permit<'_>, AcquireError> {
        self.grant_now(partition)
            .inspect_err(|_| self.shared.shed())
    }

    /// A permit now, or why not, without counting a refusal as shed: the fast path of
    /// [`acquire_in`](Self::acquire_in), which waits after it.
    #[inline]
    fn grant_now(&self, partition: PartitionId) -> Result<Permit<'_>, AcquireError> {
        let grant = self.shared.try_grant(partition)?;
        Ok(Permit::new(&self.shared, grant))
    }

    /// Waits up to `timeout` for a permit (queued in the configured [`QueueOrder`](super::QueueOrder)). Dropping the
    /// future leaves the queue; a permit granted to a dropped future is released, never leaked.
    /// The permit borrows this handle; see [`acquire_owned`](Self::acquire_owned) for one that
    /// does not.
    pub async fn acquire(&self, timeout: Duration) -> Result<Permit<'_>, AcquireError> {
        // The fast path inline here rather than through `acquire_in`'s future: one future less
        // on the uncontended round trip.
        if let Ok(permit) = self.grant_now(PartitionId::DEFAULT) {
            return Ok(permit);
        }
        self.wait(PartitionId::DEFAULT, timeout).await
    }

    /// [`acquire`](Self::acquire), answering a permit that holds its own handle on the limiter
    /// (`'static`: it can be moved into a spawned task).
    pub async fn acquire_owned(&self, timeout: Duration) -> Result<OwnedPermit, AcquireError> {
        self.acquire(timeout).await.map(Permit::into_owned)
    }

    /// [`acquire`](Self::acquire) on behalf of `partition`.
    pub async fn acquire_in(
        &self,
        partition: PartitionId,
        timeout: Duration,
    ) -> Result<Permit<'_>, AcquireError> {
        // Uncontended fast path: no timer needed.
        if let Ok(permit) = self.grant_now(partition) {
            return Ok(permit);
        }
        self.wait(partition, timeout).await
    }

    /// Queues for a permit for `partition`, up to `timeout`.
    async fn wait(
        &self,
        partition: PartitionId,
        timeout: Duration,
    ) -> Result<Permit<'_>, AcquireError> {
        match tokio::time::timeout(timeout, WaitForPermit::new(&self.shared, partition)).await {
            Ok(permit) => Ok(permit),
            Err(_) => {
                self.shared.shed();
                Err(AcquireError::Timeout { waited: timeout })
            }
        }
    }

    /// Limit, in-flight, queue length, RTT percentiles and per-partition usage.
    pub fn snapshot(&self) -> LimiterSnapshot {
        self.shared.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::vegas::algorithms::{LimitAlgorithm, Sample};

    /// Flips the limit between 1 and 4 on every sample, so lock-free grants race limit cuts.
    struct Flapping(usize);

    impl LimitAlgorithm for Flapping {
        fn name(&self) -> &'static str {
            "flapping"
        }

        fn limit(&self) -> usize {
            self.0
        }

        fn update(&mut self, _: &Sample) -> usize {
            self.0 = if self.0 == 1 { 4 } else { 1 };
            self.0
        }
    }

    #[test]
    fn lock_free_grants_race_cuts_and_queued_callers_without_exceeding_the_limit() {
        let limiter = Limiter::builder(Flapping(4)).build().unwrap();
        let held = Arc::new(AtomicUsize::new(0));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_time()
            .build()
            .unwrap();
        let tasks: Vec<_> = (0..8)
            .map(|task| {
                let (limiter, held) = (limiter.clone(), Arc::clone(&held));
                runtime.spawn(async move {
                    for round in 0..2_000 {
                        let permit = if (task + round) % 2 == 0 {
                            match limiter.try_acquire() {
                                Ok(permit) => permit,
                                Err(_) => continue,
                            }
                        } else {
                            // A lost wake-up would leave this caller queued with capacity free.
                            limiter
                                .acquire(Duration::from_secs(600))
                                .await
                                .expect("a queued caller is served once capacity frees up")
                        };
                        assert!(permit.in_flight_at_grant() <= permit.limit_at_grant());
                        assert!(held.fetch_add(1, Ordering::SeqCst) < 4, "beyond the max");
                        if round % 3 == 0 {
                            tokio::task::yield_now().await;
                        }
                        held.fetch_sub(1, Ordering::SeqCst);
                        permit.success();
                    }
                })
            })
            .collect();
        runtime.block_on(async {
            for task in tasks {
                task.await.unwrap();
            }
        });
        let snapshot = limiter.snapshot();
        assert_eq!((snapshot.in_flight, snapshot.waiting), (0, 0));
    }
}
