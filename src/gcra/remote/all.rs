//! [`RemoteRateLimiter::check_all`]: several quotas of one request, all or nothing, over one
//! store, with each quota's failure policy.

use super::limiter::RemoteRateLimiter;
use super::store::{DecideAllError, RemoteStore, StoreItem};
use crate::gcra::Decision;
use crate::gcra::check::{CheckError, StoreError, Unavailable, unspent};

use super::circuit::Gate;

/// One quota of a request: `cost` tokens of `limiter`'s quota for `key` (0 peeks). See
/// [`RemoteRateLimiter::check_all`].
#[derive(Debug)]
pub struct QuotaCheck<'a, S> {
    /// The quota's limiter.
    pub limiter: &'a RemoteRateLimiter<S>,
    /// The user's key (the limiter's store derives the store key).
    pub key: &'a [u8],
    /// Tokens asked for.
    pub cost: u32,
}

impl<S> Clone for QuotaCheck<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for QuotaCheck<'_, S> {}

impl<S: RemoteStore> RemoteRateLimiter<S> {
    /// Decides several quotas of one request all or nothing: the request is allowed only if every
    /// check fits (checks naming the same limiter and key must fit the sum of their costs), and
    /// then every check is spent; otherwise nothing is spent. One decision per check, in order,
    /// as [`LimitSet`](crate::gcra::LimitSet) defines them: when all fit, each is the spend's;
    /// otherwise each describes its quota as it is, unspent (a check that fits together with the
    /// earlier checks on its limiter and key is allowed with its current `remaining`, one that
    /// does not is denied with the time until they would fit together). The request is allowed
    /// iff every decision is.
    ///
    /// **Atomic** in one round trip when the limiters' stores are one store
    /// ([`RemoteStore::same_store`]: for Redis, clones and
    /// [`with_prefix`](crate::gcra::redis::RedisStore::with_prefix) stores) that can decide the
    /// keys together ([`RemoteStore::can_decide_all`]: for Redis, always on one server, and on a
    /// cluster when the keys share a hash slot; build the store with
    /// [`hash_tag_keys`](crate::gcra::redis::RedisStoreBuilder::hash_tag_keys) and give each
    /// quota its own prefix, so that one identity's quotas do). Otherwise the checks are
    /// **peeked, then spent** one by one: nothing is spent for a request a peek denies, but
    /// another instance may spend between the peeks and the spends, and then a later spend can be
    /// denied after earlier ones were spent.
    ///
    /// Errors: a cost above a quota's burst is
    /// [`GcraError::InsufficientCapacity`](crate::gcra::GcraError::InsufficientCapacity) without a
    /// round trip; a key holding something else fails the whole request
    /// ([`StoreError::WrongType`], [`StoreError::CorruptState`]), as does a refused call
    /// ([`StoreError::Rejected`]). When the store does not answer (or a group of its keys is
    /// skipped after a failure), each check is decided by its limiter's failure policy, still all
    /// or nothing: fail open allows, fail closed denies, and the local fallbacks are spent only
    /// if every check is allowed.
    ///
    /// ```no_run
    /// # #[cfg(feature = "redis")]
    /// # mod example {
    /// use flowguard::gcra::Quota;
    /// use flowguard::gcra::redis::RedisStore;
    /// use flowguard::gcra::remote::{QuotaCheck, RemoteRateLimiter};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// // One identity's quotas share a hash slot: a tag around the key, a prefix per quota.
    /// let store = RedisStore::builder("redis://127.0.0.1:6379")
    ///     .hash_tag_keys(true)
    ///     .prefix("api:s:")
    ///     .connect()
    ///     .await?;
    /// let per_second = RemoteRateLimiter::builder(store.clone(), Quota::per_second(10)?).build()?;
    /// let per_hour =
    ///     RemoteRateLimiter::builder(store.with_prefix("api:h:")?, Quota::per_hour(1_000)?).build()?;
    /// let key = b"tenant-7";
    /// let decisions = RemoteRateLimiter::check_all(&[
    ///     QuotaCheck { limiter: &per_second, key, cost: 1 },
    ///     QuotaCheck { limiter: &per_hour, key, cost: 1 },
    /// ])
    /// .await?;
    /// if !decisions.iter().all(|d| d.allowed) {
    ///     // 429: nothing was spent; the denied decisions carry `retry_after`.
    /// }
    /// # Ok(()) }
    /// # }
    /// ```
    pub async fn check_all(checks: &[QuotaCheck<'_, S>]) -> Result<Vec<Decision>, CheckError> {
        let Some(first) = checks.first() else {
            return Ok(Vec::new());
        };
        for check in checks {
            check.limiter.fits_burst(check.cost)?;
        }
        let store = first.limiter.store();
        let keys: Vec<S::Key> = checks
            .iter()
            .map(|c| c.limiter.store().key(c.key))
            .collect();
        let key_refs: Vec<&S::Key> = keys.iter().collect();
        let together = checks.iter().all(|c| store.same_store(c.limiter.store()))
            && store.can_decide_all(&key_refs);
        if !together {
            return peek_then_spend(checks).await;
        }
        let circuit = store.circuit();
        let mut groups: Vec<usize> = keys.iter().map(|k| store.group(k)).collect();
        groups.sort_unstable();
        groups.dedup();
        let gates: Vec<Gate> = groups.iter().map(|&g| circuit.gate(g)).collect();
        if gates.contains(&Gate::Open) {
            // Answered without I/O: spend cooperative budget, as a single check does.
            tokio::task::coop::consume_budget().await;
            let why = Unavailable::Skipped {
                probe_interval: circuit.probe_interval(),
            };
            return Ok(degrade_all(checks, why));
        }
        let items: Vec<StoreItem<'_, S::Key>> = checks
            .iter()
            .zip(&keys)
            .map(|(c, key)| StoreItem {
                key,
                rule: c.limiter.rule(),
                cost: c.cost,
            })
            .collect();
        match store.decide_all(&items).await {
            Ok(answers) => {
                for &group in &groups {
                    first.limiter.answered(group);
                }
                Ok(answers.into_iter().map(|a| a.decision).collect())
            }
            Err(DecideAllError::Check(CheckError::Store(StoreError::Unavailable(why)))) => {
                for (&group, &gate) in groups.iter().zip(&gates) {
                    circuit.failed(group);
                    if gate == Gate::Probe
                        && let Some(key) = keys.iter().find(|k| store.group(k) == group)
                    {
                        store.probe_failed(key);
                    }
                }
                Ok(degrade_all(checks, why))
            }
            Err(DecideAllError::Check(error)) => {
                for &group in &groups {
                    first.limiter.answered(group);
                }
                Err(error)
            }
            Err(DecideAllError::Apart) => peek_then_spend(checks).await,
        }
    }
}

/// The tokens `checks[i]` needs to fit: its cost and the costs of the earlier checks naming the
/// same limiter and key (see [`LimitSet`](crate::gcra::LimitSet)).
fn needed<S>(checks: &[QuotaCheck<'_, S>], i: usize) -> u32 {
    let c = &checks[i];
    checks[..i]
        .iter()
        .filter(|o| o.limiter.same_limiter(c.limiter) && o.key == c.key)
        .fold(c.cost, |sum, o| sum.saturating_add(o.cost))
}

/// Every check answered by its limiter's failure policy, all or nothing.
fn degrade_all<S: RemoteStore>(checks: &[QuotaCheck<'_, S>], why: Unavailable) -> Vec<Decision> {
    let peeks: Vec<Decision> = checks
        .iter()
        .enumerate()
        .map(|(i, c)| c.limiter.degraded_peek(c.key, needed(checks, i)))
        .collect();
    if peeks.iter().all(|d| d.allowed) {
        checks
            .iter()
            .map(|c| c.limiter.degrade(c.key, c.cost, why))
            .collect()
    } else {
        for c in checks {
            c.limiter.log_degraded(why);
        }
        peeks.into_iter().map(|d| d.because(why.into())).collect()
    }
}

/// The checks peeked, then (when every one fits) spent one by one: not atomic.
async fn peek_then_spend<S: RemoteStore>(
    checks: &[QuotaCheck<'_, S>],
) -> Result<Vec<Decision>, CheckError> {
    let mut peeks = Vec::with_capacity(checks.len());
    for c in checks {
        peeks.push(c.limiter.check_key_n(c.key, 0).await?);
    }
    let answers: Vec<Decision> = peeks
        .iter()
        .enumerate()
        .map(|(i, peek)| {
            let c = &checks[i];
            unspent(*peek, *c.limiter.quota(), u64::from(needed(checks, i)))
        })
        .collect();
    if !answers.iter().all(|d| d.allowed) {
        return Ok(answers);
    }
    let mut spent = Vec::with_capacity(checks.len());
    for c in checks {
        spent.push(c.limiter.check_key_n(c.key, c.cost).await?);
    }
    Ok(spent)
}
