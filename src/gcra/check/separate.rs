//! [`SeparateLimits`]: any [`KeyedLimit`]s as a [`LimitSet`], deciding several demands by peek
//! then spend (not atomic).

use super::KeyedLimit;
use super::decisions::Decisions;
use super::future::SetFuture;
use super::set::{Demand, LimitSet, answer_alone, unspent};
use super::set_error::SetError;
use crate::gcra::Quota;
use std::sync::Arc;

/// Any [`KeyedLimit`]s (in memory, remote, two-tier, `Arc<dyn KeyedLimit>`) as a [`LimitSet`]:
/// the generic fallback, for limits that share no lock and no store.
///
/// One demand is one [`check`](KeyedLimit::check), exact like the limit. Several demands are
/// decided by **peek, then spend**: every demand is peeked (cost 0, nothing spent); if one does
/// not fit, the request is denied and nothing is spent; otherwise each is spent in order. This is
/// **not atomic**: a request of another task or instance that spends between the peek and the
/// spends can make a later spend be denied after earlier ones were granted. The answer then says
/// so truthfully (denied, with the earlier demands spent). Use [`MemoryLimitSet`](super::MemoryLimitSet)
/// in memory, or a shared store's own set, where that matters.
///
/// A peek of a two-tier limiter reads only this instance's reservoir: the peek may pass while the
/// shared quota is spent, and the spend then decides.
///
/// ```
/// use flowguard::gcra::{Demand, KeyedLimit, KeyedRateLimiter, LimitSet, Quota, SeparateLimits};
/// use std::sync::Arc;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let per_key: Arc<dyn KeyedLimit> = Arc::new(KeyedRateLimiter::<Vec<u8>>::new(Quota::per_second(5)?));
/// let global: Arc<dyn KeyedLimit> = Arc::new(KeyedRateLimiter::<Vec<u8>>::new(Quota::per_second(1)?));
/// let set = SeparateLimits::shared([per_key, global]);
/// let request = |key| [Demand { limit: 0, key, cost: 1 }, Demand { limit: 1, key: b"", cost: 1 }];
/// assert!(set.check_all(&request(b"a")).await?.allowed());
/// let denied = set.check_all(&request(b"b")).await?;
/// assert!(!denied.allowed() && denied[0].remaining() == Some(5));
/// # Ok(())
/// # }
/// ```
///
/// The limits are kept as `Arc<dyn KeyedLimit>`, so the set's type names no limiter (a type
/// with a lifetime bound inside a service keeps hyper's `serve_connection` in `tokio::spawn`
/// from proving `Send`).
#[derive(Clone)]
pub struct SeparateLimits {
    limits: Vec<Arc<dyn KeyedLimit>>,
}

impl SeparateLimits {
    /// A set of `limits`; demands name them by their position.
    pub fn new<L: KeyedLimit + 'static>(limits: impl IntoIterator<Item = L>) -> SeparateLimits {
        SeparateLimits {
            limits: limits
                .into_iter()
                .map(|l| Arc::new(l) as Arc<dyn KeyedLimit>)
                .collect(),
        }
    }

    /// A set of limits already shared as `Arc<dyn KeyedLimit>`.
    pub fn shared(limits: impl IntoIterator<Item = Arc<dyn KeyedLimit>>) -> SeparateLimits {
        SeparateLimits {
            limits: limits.into_iter().collect(),
        }
    }

    /// The limits.
    pub fn as_slice(&self) -> &[Arc<dyn KeyedLimit>] {
        &self.limits
    }
}

impl std::fmt::Debug for SeparateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeparateLimits")
            .field(
                "quotas",
                &self.limits.iter().map(|l| l.quota()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl LimitSet for SeparateLimits {
    fn limits(&self) -> usize {
        self.limits.len()
    }

    fn quota(&self, limit: usize) -> Option<Quota> {
        self.limits.get(limit).map(KeyedLimit::quota)
    }

    fn check_all(&self, demands: &[Demand<'_>]) -> SetFuture {
        if let Some(answer) = answer_alone(&self.limits, demands) {
            return answer;
        }
        let owned: Vec<Owned> = demands
            .iter()
            .map(|d| Owned {
                limit: self.limits[d.limit].clone(),
                index: d.limit,
                key: d.key.to_vec(),
                cost: d.cost,
            })
            .collect();
        SetFuture::new(async move { peek_then_spend(&owned).await })
    }
}

/// A demand the future owns.
struct Owned {
    limit: Arc<dyn KeyedLimit>,
    index: usize,
    key: Vec<u8>,
    cost: u32,
}

async fn peek_then_spend(demands: &[Owned]) -> Result<Decisions, SetError> {
    let check = |i: usize, cost: u32| {
        let future = demands[i].limit.check(&demands[i].key, cost);
        async move {
            future
                .await
                .map_err(|error| SetError::Check { demand: i, error })
        }
    };
    let mut peeks = Decisions::with_capacity(demands.len());
    let mut fits = true;
    for (i, demand) in demands.iter().enumerate() {
        let peek = check(i, 0).await?;
        // Earlier demands on the same limit and key need room as well.
        let needed = demands[..=i]
            .iter()
            .filter(|d| d.index == demand.index && d.key == demand.key)
            .map(|d| u64::from(d.cost))
            .sum::<u64>();
        let answer = unspent(peek, demand.limit.quota(), needed);
        fits &= answer.allowed;
        peeks.push(answer);
    }
    if !fits {
        return Ok(peeks);
    }
    let mut decisions = Decisions::with_capacity(demands.len());
    for (i, demand) in demands.iter().enumerate() {
        let d = check(i, demand.cost).await?;
        decisions.push(d);
        if !d.allowed {
            // Another request spent in between: the earlier demands stay spent (not atomic).
            for peek in &peeks.as_slice()[i + 1..] {
                decisions.push(*peek);
            }
            return Ok(decisions);
        }
    }
    Ok(decisions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::gcra::KeyedRateLimiter;

    fn limit(quota: Quota) -> Arc<dyn KeyedLimit> {
        Arc::new(
            KeyedRateLimiter::<Vec<u8>>::builder(quota)
                .clock(ManualClock::new())
                .build()
                .unwrap(),
        )
    }

    #[tokio::test]
    async fn a_denial_spends_nothing_and_waits_long_enough() {
        let per_second = Quota::per_second(3).unwrap();
        let set = SeparateLimits::new(vec![
            limit(Quota::per_minute(10).unwrap()),
            limit(per_second),
        ]);
        let request = [
            Demand {
                limit: 0,
                key: b"k",
                cost: 1,
            },
            Demand {
                limit: 1,
                key: b"k",
                cost: 2,
            },
        ];
        assert!(set.check_all(&request).await.unwrap().allowed());
        let denied = set.check_all(&request).await.unwrap();
        assert!(!denied.allowed());
        assert_eq!(denied[0].remaining, 9, "not spent");
        // One token left of 3 per second; two fit once another 333,333,333 1/3 ns passed.
        assert_eq!(
            denied[1].retry_after,
            Some(std::time::Duration::from_nanos(333_333_334))
        );
        let peek = set
            .check_all(&[Demand {
                limit: 0,
                key: b"k",
                cost: 0,
            }])
            .await
            .unwrap();
        assert_eq!(peek[0].remaining, 9);
    }
}
