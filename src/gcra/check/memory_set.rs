//! [`MemoryLimitSet`]: several in-memory keyed limits deciding demands all or nothing, under
//! striped locks.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use super::decisions::Decisions;
use super::error::CheckError;
use super::future::SetFuture;
use super::set::{Demand, LimitSet, needed, validate};
use super::set_error::SetError;
use crate::clock::{Clock, MonotonicClock};
use crate::gcra::{ConfigError, DEFAULT_MAX_KEYS, Decision, KeyedRateLimiter, Overflow, Quota};

/// Lock stripes of a set: demands whose (limit, key) hash to the same stripe serialize.
const STRIPES: usize = 1024;
/// Demands whose stripes are sorted on the stack; more use the heap.
const INLINE_DEMANDS: usize = 8;

/// In-memory keyed limits (one bounded [`KeyedRateLimiter`] per limit) that decide a request's
/// demands all or nothing: a denied request spends nothing from any limit, whatever runs
/// concurrently.
///
/// How: every check of several demands holds the locks of the stripes its (limit, key) pairs hash
/// to (1,024 stripes, taken in order, so no two checks wait on each other), grants the demands
/// one after another, and when one is denied gives back what the earlier ones were granted
/// (exact: nobody else spent on those keys in between). An allowed request costs one
/// compare-and-swap per demand plus the locks; nothing is allocated for up to 8 demands.
///
/// A check of one demand takes no lock while its limit has never been part of a check of
/// several demands, so a set used one demand at a time (one policy) costs what a
/// [`KeyedRateLimiter`] costs. Such a check that overlaps the very first joint check of its limit
/// may see that check's grant before it is given back (and be denied for it); from then on every
/// check of the limit takes its lock.
///
/// ```
/// use flowguard::gcra::{Demand, LimitSet, MemoryLimitSet, Quota};
///
/// let set = MemoryLimitSet::builder([Quota::per_second(10)?, Quota::per_second(1)?])
///     .max_keys(10_000)
///     .build()?;
/// // Limit 0 per key, limit 1 global (one key for everyone).
/// let request = |key| [Demand { limit: 0, key, cost: 1 }, Demand { limit: 1, key: b"", cost: 1 }];
/// # let answer = set.check_all(&request(b"alice")).into_ready().unwrap()?;
/// # assert!(answer.allowed());
/// # let answer = set.check_all(&request(b"bob")).into_ready().unwrap()?;
/// # assert!(!answer.allowed());
/// # assert_eq!(answer[0].remaining(), Some(10), "bob's own limit is untouched");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MemoryLimitSet<C: Clock = MonotonicClock> {
    /// Shared with the sets [`extended`](MemoryLimitSet::extended) from this one.
    limits: Box<[Arc<Limit<C>>]>,
    stripes: Arc<[Mutex<()>]>,
    hasher: hashbrown::DefaultHashBuilder,
    /// How new limits are built: what the builder was given.
    max_keys: usize,
    overflow: Overflow,
    clock: C,
}

struct Limit<C: Clock> {
    limiter: KeyedRateLimiter<Vec<u8>, C>,
    /// Whether a check of several demands has named this limit: then every check locks.
    joint: AtomicBool,
}

/// Configures a [`MemoryLimitSet`]: [`MemoryLimitSet::builder`].
#[must_use = "a builder does nothing until `build` is called"]
#[derive(Debug)]
pub struct MemoryLimitSetBuilder<C = MonotonicClock> {
    quotas: Vec<Quota>,
    max_keys: usize,
    overflow: Overflow,
    clock: C,
}

impl MemoryLimitSet {
    /// A set of one limit per quota, on the real clock, with the defaults of
    /// [`KeyedRateLimiter`] ([`DEFAULT_MAX_KEYS`] keys per limit, [`Overflow::Reject`]).
    pub fn new(quotas: impl IntoIterator<Item = Quota>) -> MemoryLimitSet {
        MemoryLimitSet::builder(quotas)
            .build()
            .unwrap_or_else(|_| unreachable!("the default max_keys is not zero"))
    }

    /// Starts configuring a set of one limit per quota.
    pub fn builder(quotas: impl IntoIterator<Item = Quota>) -> MemoryLimitSetBuilder {
        MemoryLimitSetBuilder {
            quotas: quotas.into_iter().collect(),
            max_keys: DEFAULT_MAX_KEYS,
            overflow: Overflow::Reject,
            clock: MonotonicClock::new(),
        }
    }
}

impl<C: Clock> MemoryLimitSetBuilder<C> {
    /// The most keys each limit stores at once (default [`DEFAULT_MAX_KEYS`]); at least 1.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// What a full limit does with a new key (default [`Overflow::Reject`]).
    pub fn overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = overflow;
        self
    }

    /// Reads time from `clock` (every limit shares it).
    pub fn clock<C2: Clock + Clone>(self, clock: C2) -> MemoryLimitSetBuilder<C2> {
        MemoryLimitSetBuilder {
            quotas: self.quotas,
            max_keys: self.max_keys,
            overflow: self.overflow,
            clock,
        }
    }

    /// Builds the set; `max_keys == 0` is [`ConfigError::ZeroMaxKeys`].
    pub fn build(self) -> Result<MemoryLimitSet<C>, ConfigError>
    where
        C: Clone,
    {
        let limits = self
            .quotas
            .iter()
            .map(|quota| Limit::build(*quota, self.max_keys, self.overflow, &self.clock))
            .collect::<Result<_, ConfigError>>()?;
        Ok(MemoryLimitSet {
            limits,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            hasher: hashbrown::DefaultHashBuilder::default(),
            max_keys: self.max_keys,
            overflow: self.overflow,
            clock: self.clock,
        })
    }
}

impl<C: Clock + Clone> Limit<C> {
    fn build(
        quota: Quota,
        max_keys: usize,
        overflow: Overflow,
        clock: &C,
    ) -> Result<Arc<Limit<C>>, ConfigError> {
        Ok(Arc::new(Limit {
            limiter: KeyedRateLimiter::builder(quota)
                .max_keys(max_keys)
                .overflow(overflow)
                .clock(clock.clone())
                .build()?,
            joint: AtomicBool::new(false),
        }))
    }
}

impl<C: Clock + Clone> MemoryLimitSet<C> {
    /// A set whose first limits are this set's, **sharing their state** (and their locks, so
    /// that a check in either set is all or nothing against checks in the other), followed by
    /// one new limit per quota of `more`, built as this set's were (`max_keys`, overflow,
    /// clock), or the error building one of them reports. This set keeps working unchanged.
    ///
    /// For configurations reloaded while serving: the limits that stay keep counting, new
    /// ones start full, and requests already holding the old set finish on it.
    ///
    /// ```
    /// use flowguard::gcra::{Demand, LimitSet, MemoryLimitSet, Quota};
    ///
    /// let first = MemoryLimitSet::new([Quota::per_minute(2)?]);
    /// assert!(first.decide(&[Demand { limit: 0, key: b"k", cost: 2 }])?.allowed());
    /// let second = first.extended([Quota::per_second(5)?])?;
    /// assert_eq!(second.limits(), 2);
    /// // Limit 0 is the same limit: still spent.
    /// assert!(!second.decide(&[Demand { limit: 0, key: b"k", cost: 1 }])?.allowed());
    /// assert!(second.decide(&[Demand { limit: 1, key: b"k", cost: 5 }])?.allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn extended(
        &self,
        more: impl IntoIterator<Item = Quota>,
    ) -> Result<MemoryLimitSet<C>, ConfigError> {
        let limits = self
            .limits
            .iter()
            .cloned()
            .map(Ok)
            .chain(
                more.into_iter()
                    .map(|q| Limit::build(q, self.max_keys, self.overflow, &self.clock)),
            )
            .collect::<Result<_, ConfigError>>()?;
        Ok(MemoryLimitSet {
            limits,
            stripes: Arc::clone(&self.stripes),
            hasher: self.hasher.clone(),
            max_keys: self.max_keys,
            overflow: self.overflow,
            clock: self.clock.clone(),
        })
    }
}

impl<C: Clock> MemoryLimitSet<C> {
    /// The in-memory limiter of limit `limit` (for inspection: spending through it directly
    /// bypasses the set's locks).
    pub fn limiter(&self, limit: usize) -> Option<&KeyedRateLimiter<Vec<u8>, C>> {
        self.limits.get(limit).map(|l| &l.limiter)
    }

    /// Decides `demands` (see [`LimitSet::check_all`]).
    pub fn decide(&self, demands: &[Demand<'_>]) -> Result<Decisions, SetError> {
        if let [demand] = demands
            && let Some(limit) = self.limits.get(demand.limit)
            && !limit.joint.load(Ordering::Acquire)
        {
            // One demand on a limit no joint check has named: a plain check, no lock.
            return spend(limit, demand, 0).map(Decisions::one);
        }
        validate(
            demands,
            |l| self.limits.get(l).map(|l| l.limiter.quota().burst()),
            self.limits.len(),
        )?;
        if demands.len() > 1 {
            for d in demands {
                let joint = &self.limits[d.limit].joint;
                if !joint.load(Ordering::Relaxed) {
                    joint.store(true, Ordering::SeqCst);
                }
            }
        }
        let stripe = |d: &Demand<'_>| (self.hasher.hash_one((d.limit, d.key)) as usize) % STRIPES;
        if demands.len() <= INLINE_DEMANDS {
            let mut stripes = [0usize; INLINE_DEMANDS];
            for (slot, d) in stripes.iter_mut().zip(demands) {
                *slot = stripe(d);
            }
            let stripes = &mut stripes[..demands.len()];
            stripes.sort_unstable();
            locked(&self.stripes, stripes, None, || self.decide_locked(demands))
        } else {
            let mut stripes: Vec<usize> = demands.iter().map(stripe).collect();
            stripes.sort_unstable();
            locked(&self.stripes, &stripes, None, || {
                self.decide_locked(demands)
            })
        }
    }

    /// Grants the demands in order; on a denial or an error, gives back what was granted.
    /// Runs under the locks of every demand's stripe.
    fn decide_locked(&self, demands: &[Demand<'_>]) -> Result<Decisions, SetError> {
        let mut decisions = Decisions::with_capacity(demands.len());
        for (i, demand) in demands.iter().enumerate() {
            let limit = &self.limits[demand.limit];
            match spend(limit, demand, i) {
                Ok(d) if d.allowed => decisions.push(d),
                Ok(denied) => {
                    self.refund(&demands[..i], &decisions);
                    return self.report_denial(demands, i, denied);
                }
                Err(e) => {
                    self.refund(&demands[..i], &decisions);
                    return Err(e);
                }
            }
        }
        Ok(decisions)
    }

    /// Gives back what `granted` (the decisions of `demands`, all allowed) spent.
    fn refund(&self, demands: &[Demand<'_>], granted: &Decisions) {
        for (demand, decision) in demands.iter().zip(granted.as_slice()) {
            if decision.degraded.is_none() && demand.cost > 0 {
                self.limits[demand.limit]
                    .limiter
                    .refund_bytes(demand.key, demand.cost);
            }
        }
    }

    /// The answers of a request denied at demand `denied_at` (`denied` is its decision), once
    /// everything granted was given back, as [`LimitSet`] defines them: each demand fits when
    /// it fits together with the earlier demands on its limit and key, and reports the key
    /// unspent.
    fn report_denial(
        &self,
        demands: &[Demand<'_>],
        denied_at: usize,
        denied: Decision,
    ) -> Result<Decisions, SetError> {
        let mut decisions = Decisions::with_capacity(demands.len());
        for (i, demand) in demands.iter().enumerate() {
            let limit = &self.limits[demand.limit];
            let peek = spend(limit, &Demand { cost: 0, ..*demand }, i)?;
            if i == denied_at {
                // Denied with the earlier demands granted: its wait is the one for their costs
                // and its own together.
                decisions.push(Decision::new(
                    false,
                    peek.limit,
                    peek.remaining,
                    denied.retry_after,
                    peek.reset_after,
                ));
                continue;
            }
            let needed = needed(demands, i);
            if peek.allowed && needed <= u64::from(peek.remaining) {
                decisions.push(peek);
                continue;
            }
            // It does not fit: a denied check of the costs together changes nothing and says
            // when they will fit.
            let together = Demand {
                cost: u32::try_from(needed).unwrap_or(u32::MAX),
                ..*demand
            };
            let alone = spend(limit, &together, i)?;
            if alone.allowed && alone.degraded.is_none() && together.cost > 0 {
                limit.limiter.refund_bytes(demand.key, together.cost);
                decisions.push(peek);
            } else {
                decisions.push(Decision::new(
                    false,
                    peek.limit,
                    peek.remaining,
                    alone.retry_after,
                    peek.reset_after,
                ));
            }
        }
        Ok(decisions)
    }
}

/// One demand's check against its limit; `index` is its place among the demands, for errors.
fn spend<C: Clock>(
    limit: &Limit<C>,
    demand: &Demand<'_>,
    index: usize,
) -> Result<Decision, SetError> {
    limit
        .limiter
        .check_bytes(demand.key, demand.cost)
        .map_err(|e| SetError::Check {
            demand: index,
            error: CheckError::Gcra(e),
        })
}

/// Runs `f` holding the locks of `sorted` stripes, each once, in order (so two callers never
/// wait on each other). Recursive, so the guards live on the stack.
fn locked<R>(
    stripes: &[Mutex<()>],
    sorted: &[usize],
    held: Option<usize>,
    f: impl FnOnce() -> R,
) -> R {
    match sorted.split_first() {
        None => f(),
        Some((&first, rest)) if held == Some(first) => locked(stripes, rest, held, f),
        Some((&first, rest)) => {
            let _guard = stripes[first].lock();
            locked(stripes, rest, Some(first), f)
        }
    }
}

impl<C: Clock> LimitSet for MemoryLimitSet<C> {
    fn limits(&self) -> usize {
        self.limits.len()
    }

    fn quota(&self, limit: usize) -> Option<Quota> {
        self.limits.get(limit).map(|l| *l.limiter.quota())
    }

    fn check_all(&self, demands: &[Demand<'_>]) -> SetFuture {
        SetFuture::ready(self.decide(demands))
    }
}

impl<C: Clock> std::fmt::Debug for MemoryLimitSet<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryLimitSet")
            .field(
                "limits",
                &self.limits.iter().map(|l| &l.limiter).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::gcra::GcraError;

    fn set(quotas: &[Quota]) -> MemoryLimitSet<ManualClock> {
        MemoryLimitSet::builder(quotas.iter().copied())
            .clock(ManualClock::new())
            .build()
            .unwrap()
    }

    fn demand(limit: usize, key: &[u8], cost: u32) -> Demand<'_> {
        Demand { limit, key, cost }
    }

    fn remaining(set: &MemoryLimitSet<ManualClock>, limit: usize, key: &[u8]) -> u32 {
        set.decide(&[demand(limit, key, 0)]).unwrap()[0].remaining
    }

    #[test]
    fn a_denial_spends_nothing_and_says_when_each_fits() {
        let per_second = Quota::per_second(2).unwrap();
        let per_minute = Quota::per_minute(3).unwrap();
        let s = set(&[per_minute, per_second]);
        let request = [demand(0, b"k", 1), demand(1, b"k", 2)];
        assert!(s.decide(&request).unwrap().allowed());
        let denied = s.decide(&request).unwrap();
        assert!(!denied.allowed());
        assert!(denied[0].allowed, "the per-minute limit alone would fit");
        assert_eq!(denied[0].remaining, 2, "and was given back");
        assert!(!denied[1].allowed);
        assert_eq!(
            denied[1].retry_after,
            Some(std::time::Duration::from_secs(1))
        );
        assert_eq!(remaining(&s, 0, b"k"), 2);
        assert_eq!(remaining(&s, 1, b"k"), 0);
    }

    #[test]
    fn costs_above_a_burst_and_unknown_limits_are_errors_that_spend_nothing() {
        let s = set(&[Quota::per_second(5).unwrap(), Quota::per_second(3).unwrap()]);
        let too_big = s.decide(&[demand(0, b"k", 1), demand(1, b"k", 4)]);
        assert_eq!(
            too_big,
            Err(SetError::Check {
                demand: 1,
                error: CheckError::Gcra(GcraError::InsufficientCapacity { cost: 4, burst: 3 })
            })
        );
        let summed = s.decide(&[demand(1, b"k", 2), demand(1, b"k", 2)]);
        assert!(matches!(summed, Err(SetError::Check { demand: 1, .. })));
        assert_eq!(
            s.decide(&[demand(0, b"k", 1), demand(2, b"k", 1)]),
            Err(SetError::UnknownLimit {
                demand: 1,
                limit: 2,
                limits: 2
            })
        );
        assert_eq!(remaining(&s, 0, b"k"), 5);
        assert_eq!(remaining(&s, 1, b"k"), 3);
    }

    #[test]
    fn a_full_limit_gives_back_what_the_others_were_granted() {
        let s = MemoryLimitSet::builder([Quota::per_second(5).unwrap(); 2])
            .max_keys(1)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        assert!(s.decide(&[demand(1, b"first", 1)]).unwrap().allowed());
        let full = s.decide(&[demand(0, b"k", 1), demand(1, b"second", 1)]);
        assert!(matches!(
            full,
            Err(SetError::Check {
                demand: 1,
                error: CheckError::Gcra(GcraError::KeyLimitReached { .. })
            })
        ));
        assert_eq!(remaining(&s, 0, b"k"), 5);
    }

    #[test]
    fn an_extended_set_shares_the_old_limits_both_ways_and_adds_new_ones() {
        let clock = ManualClock::new();
        let old = MemoryLimitSet::builder([Quota::per_minute(3).unwrap()])
            .max_keys(4)
            .clock(clock.clone())
            .build()
            .unwrap();
        assert!(old.decide(&[demand(0, b"k", 1)]).unwrap().allowed());
        let new = old.extended([Quota::per_second(2).unwrap()]).unwrap();
        assert_eq!((old.limits(), new.limits()), (1, 2));
        assert_eq!(remaining(&new, 0, b"k"), 2);
        // Spent through the new set (jointly), seen by the old one.
        assert!(
            new.decide(&[demand(0, b"k", 2), demand(1, b"k", 1)])
                .unwrap()
                .allowed()
        );
        assert_eq!(old.decide(&[demand(0, b"k", 0)]).unwrap()[0].remaining, 0);
        assert_eq!(remaining(&new, 1, b"k"), 1);
        // Built as the old limits were: on the same clock.
        clock.advance(std::time::Duration::from_millis(500));
        assert_eq!(remaining(&new, 1, b"k"), 2);
    }

    /// Tasks race requests naming {wide, narrow} against requests naming {narrow} alone (a
    /// single demand, which locks once the limit has been named jointly). `wide` is spent
    /// exactly once per allowed pair: no pair spends `wide` and is then denied on `narrow`.
    #[test]
    fn under_contention_a_denied_request_never_spends() {
        let day = std::time::Duration::from_secs(86_400);
        let wide = Quota::new(10, day).unwrap().with_burst(5000).unwrap();
        let narrow = Quota::new(200, day).unwrap();
        let s = Arc::new(set(&[wide, narrow]));
        let pair = [demand(0, b"w", 1), demand(1, b"n", 1)];
        assert!(
            s.decide(&pair).unwrap().allowed(),
            "marks both limits joint"
        );
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    let pair = [demand(0, b"w", 1), demand(1, b"n", 1)];
                    let mut allowed = 0u32;
                    for _ in 0..200 {
                        let checks = if t % 2 == 0 { &pair[..] } else { &pair[1..] };
                        let d = s.decide(checks).unwrap();
                        if t % 2 == 0 && d.allowed() {
                            allowed += 1;
                        }
                    }
                    allowed
                })
            })
            .collect();
        let pairs: u32 = 1 + threads.into_iter().map(|t| t.join().unwrap()).sum::<u32>();
        assert_eq!(5000 - remaining(&s, 0, b"w"), pairs);
        assert_eq!(remaining(&s, 1, b"n"), 0, "the narrow limit was used up");
    }
}
