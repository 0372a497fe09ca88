//! [`LimitSet`]: several keyed limits deciding a request's demands all or nothing.

use super::KeyedLimit;
use super::decisions::Decisions;
use super::error::CheckError;
use super::future::SetFuture;
use super::set_error::SetError;
use crate::gcra::{Decision, GcraError, Quota};

/// One demand of a joint check: `cost` tokens of limit number `limit` of the set, for `key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Demand<'a> {
    /// Which limit of the set (an index, from 0).
    pub limit: usize,
    /// The key, as bytes (binary-safe). Limits keep separate state: the same key under two
    /// limits is two keys.
    pub key: &'a [u8],
    /// Tokens asked for; 0 peeks.
    pub cost: u32,
}

/// A limit a [`LimitSet`] is built with: its quota, and a name that stays the same across
/// deployments (a shared store keeps each limit's state under it; in memory it only labels).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitSpec {
    name: String,
    quota: Quota,
}

impl LimitSpec {
    /// A limit named `name` with `quota`.
    pub fn new(name: impl Into<String>, quota: Quota) -> LimitSpec {
        LimitSpec {
            name: name.into(),
            quota,
        }
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.quota
    }
}

/// Several keyed limits that decide a request's [`Demand`]s together: the request is allowed
/// only if every demand fits, and then every demand is spent.
///
/// The contract every implementation states how well it keeps:
///
/// * **All or nothing**: a denied request spends nothing from any limit. Atomic sets
///   ([`MemoryLimitSet`](super::MemoryLimitSet)) keep this whatever runs concurrently;
///   [`SeparateLimits`](super::SeparateLimits) (any [`KeyedLimit`](super::KeyedLimit)s) only
///   when no other request spends between its peek and its spends.
/// * A demand whose cost exceeds its limit's burst, or demands naming the same limit and key
///   whose costs add up beyond it, can never pass: [`SetError::Check`] with
///   [`GcraError::InsufficientCapacity`], nothing spent.
/// * A demand naming a limit the set does not have is [`SetError::UnknownLimit`].
/// * The answer has one [`Decision`](crate::gcra::Decision) per demand, in order (see
///   [`Decisions`](super::Decisions)).
/// * **Allowed**: each decision is its demand's spend, in order; a demand naming the same limit
///   and key as earlier ones is decided after their spends.
/// * **Denied**: nothing was spent, and each decision reports its key as it stands: `remaining`
///   and `reset_after` are the key's, unspent. A demand *fits* (is `allowed`) when its cost
///   fits together with the costs of the earlier demands naming the same limit and key; one that
///   does not is denied with `retry_after`, the time until those costs fit together. So with 1
///   token left, demands of cost 2 then 1 on one key are both denied (2 does not fit, nor do 3),
///   both report `remaining` 1, and the second waits for 3 tokens.
///
/// Every set of the crate reports this, whatever keeps the state: in memory
/// ([`MemoryLimitSet`](super::MemoryLimitSet)), in Redis
/// ([`RemoteLimitSet`](crate::gcra::remote::RemoteLimitSet), one script call or peeks then
/// spends), and over any limits, two-tier ones included
/// ([`SeparateLimits`](super::SeparateLimits)).
///
/// ```
/// use flowguard::gcra::{Demand, LimitSet, MemoryLimitSet, Quota};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Per key: 2 per second and 3 per minute.
/// let set = MemoryLimitSet::new([Quota::per_second(2)?, Quota::per_minute(3)?]);
/// let both = |key| [Demand { limit: 0, key, cost: 1 }, Demand { limit: 1, key, cost: 1 }];
/// assert!(set.check_all(&both(b"alice")).await?.allowed());
/// assert!(set.check_all(&both(b"alice")).await?.allowed());
/// let third = set.check_all(&both(b"alice")).await?;
/// assert!(!third.allowed()); // the per-second limit is spent...
/// assert!(third[1].allowed); // ...the per-minute one would fit,
/// assert_eq!(third[1].remaining(), Some(1)); // and was not spent.
/// # Ok(())
/// # }
/// ```
pub trait LimitSet: Send + Sync {
    /// How many limits the set has; demands name them `0..limits()`.
    fn limits(&self) -> usize;

    /// The quota of limit `limit`, `None` beyond [`limits`](Self::limits).
    fn quota(&self, limit: usize) -> Option<Quota>;

    /// Decides `demands` all or nothing (see the trait's contract). The future owns what it
    /// needs: it borrows neither the set nor the keys.
    fn check_all(&self, demands: &[Demand<'_>]) -> SetFuture;
}

impl<T: LimitSet + ?Sized> LimitSet for std::sync::Arc<T> {
    fn limits(&self) -> usize {
        (**self).limits()
    }

    fn quota(&self, limit: usize) -> Option<Quota> {
        (**self).quota(limit)
    }

    fn check_all(&self, demands: &[Demand<'_>]) -> SetFuture {
        (**self).check_all(demands)
    }
}

/// Checks what every set checks before deciding anything: each demand names a limit of the set,
/// and each (limit, key)'s total cost fits its burst. `burst(limit)` is `None` for an unknown
/// limit. Every [`LimitSet`] of the crate (a shared store's too) starts with it.
pub(crate) fn validate(
    demands: &[Demand<'_>],
    burst: impl Fn(usize) -> Option<u32>,
    limits: usize,
) -> Result<(), SetError> {
    for (i, demand) in demands.iter().enumerate() {
        let Some(burst) = burst(demand.limit) else {
            return Err(SetError::UnknownLimit {
                demand: i,
                limit: demand.limit,
                limits,
            });
        };
        let total = needed(demands, i);
        if total > u64::from(burst) {
            return Err(SetError::Check {
                demand: i,
                error: CheckError::Gcra(GcraError::InsufficientCapacity {
                    cost: u32::try_from(total).unwrap_or(u32::MAX),
                    burst,
                }),
            });
        }
    }
    Ok(())
}

/// The tokens demand `i` needs to fit: its cost and the costs of the earlier demands naming the
/// same limit and key (see [`LimitSet`]).
pub(crate) fn needed(demands: &[Demand<'_>], i: usize) -> u64 {
    let demand = &demands[i];
    demands[..i]
        .iter()
        .filter(|d| d.limit == demand.limit && d.key == demand.key)
        .fold(u64::from(demand.cost), |sum, d| sum + u64::from(d.cost))
}

/// A demand's decision in a request that spends nothing, from a `peek` at its key (see
/// [`LimitSet`]): the peek when `needed` tokens fit, else a denial with the peek's numbers and
/// the time until `needed` tokens fit (a peek denied by a failure policy keeps its own).
pub(crate) fn unspent(peek: Decision, quota: Quota, needed: u64) -> Decision {
    if peek.allowed && needed <= u64::from(peek.remaining) {
        return peek;
    }
    let retry_after = if !peek.allowed {
        peek.retry_after
    } else {
        // Tokens come back one per T: `needed` fit once the key is back to `B - needed` spent.
        let (num, den) = quota.emission_interval_exact();
        let spare = u128::from(quota.burst()).saturating_sub(u128::from(needed));
        let earned = spare * num / u128::from(den);
        let earned = std::time::Duration::from_nanos(u64::try_from(earned).unwrap_or(u64::MAX));
        Some(peek.reset_after.saturating_sub(earned))
    };
    Decision {
        allowed: false,
        retry_after,
        ..peek
    }
}

/// The start of `check_all` for a set of [`KeyedLimit`]s (limit `i` is `limits[i]`): `Some` with
/// the answer when it needs no joint decision (demands that do not validate, or a lone demand,
/// which its limit's own check decides, ready at once when the check is), `None` when the set
/// must decide two or more demands together.
pub(crate) fn answer_alone<L: KeyedLimit>(
    limits: &[L],
    demands: &[Demand<'_>],
) -> Option<SetFuture> {
    let burst = |l: usize| limits.get(l).map(|l| l.quota().burst());
    if let Err(e) = validate(demands, burst, limits.len()) {
        return Some(SetFuture::ready(Err(e)));
    }
    let [demand] = demands else {
        return None;
    };
    let check = limits[demand.limit].check(demand.key, demand.cost);
    Some(match check.into_ready() {
        Ok(answer) => SetFuture::ready(alone(answer)),
        Err(pending) => SetFuture::new(async move { alone(pending.await) }),
    })
}

/// A lone demand's answer as the set's.
fn alone(answer: Result<Decision, CheckError>) -> Result<Decisions, SetError> {
    answer
        .map(Decisions::one)
        .map_err(|error| SetError::Check { demand: 0, error })
}
