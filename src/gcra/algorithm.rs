//! [`Gcra`]: the Generic Cell Rate Algorithm as a pure function of (stored TAT, now, cost).
//!
//! Nothing here reads a clock or touches storage; every store (in memory, Redis, two-tier)
//! feeds it the stored Theoretical Arrival Time and the current time, and stores what it returns.

use std::time::Duration;

use super::decision::Decision;
use super::error::GcraError;
use super::quota::{Quota, QuotaError, gcd};

/// The largest denominator a rule accepts: fractions of a tick stay below 2^52, so the sum of two
/// of them is exact even in a double (the Redis script runs in Lua, whose numbers are doubles).
const MAX_DENOMINATOR: u128 = 1 << 52;

/// An exact number of ticks, `whole + frac / den`, where `den` is the rule's
/// [`Gcra::denominator`]: a TAT, the emission interval or the burst window.
///
/// A `frac` of `den` or more is carried into `whole` when a rule reads the value, so any pair
/// denotes the time it spells; the rule only ever returns `frac < den`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ticks {
    /// Whole ticks.
    pub whole: u64,
    /// The fraction of a tick, in units of `1 / den` tick.
    pub frac: u64,
}

impl Ticks {
    /// Zero ticks: the stored TAT of an absent key.
    pub const ZERO: Ticks = Ticks { whole: 0, frac: 0 };
}

impl From<u64> for Ticks {
    /// A whole number of ticks.
    fn from(whole: u64) -> Ticks {
        Ticks { whole, frac: 0 }
    }
}

/// The GCRA rule for one quota, in integer ticks of a fixed resolution (nanoseconds by default).
///
/// With emission interval `T`, burst `B` and a request of cost `n` at `now` against stored `tat`
/// (a stored value below `now`, including 0 for an absent key, means "idle: `tat = now`"):
///
/// * `n > B` is [`GcraError::InsufficientCapacity`]: it can never be allowed.
/// * `n == 0` is a peek: nothing changes.
/// * `tat' = max(tat, now) + n*T`; allowed iff `tat' - now <= B*T`, and then `tat'` is stored.
///   A denied request changes nothing.
///
/// **Exact arithmetic.** `T = period / rate` need not be a whole number of ticks (3 per second
/// is 333,333,333 1/3 ns). The rule keeps `T` as the fraction `q + r/den` in lowest terms and
/// every TAT as [`Ticks`] `(whole, frac)` with `frac < den`, adds with a carry and compares
/// exactly, so nothing is ever rounded in the client's favour: in any window of length `t` at
/// most `B + t/T` tokens are admitted, and a client sending at exactly the nominal rate (its k-th
/// request at the first tick not before `k*T`) is never denied, provided the tolerance
/// `(B-1)*T` is at least one tick or `T` is whole (with `B = 1` and a fractional `T`, two such
/// requests can be less than `T` apart, which the bound itself forbids). Of the reported numbers, `remaining` is exact (`floor((B*T - (tat' - now)) / T)`), and
/// `retry_after` and `reset_after` are rounded **up** to the tick, so a client that waits what it
/// was told is allowed. When `T` is a whole number of ticks (`den == 1`, e.g. any rate dividing
/// 10^9 per second at nanosecond ticks), the fraction is always zero and a TAT fits in one `u64`.
///
/// ```
/// use flowguard::gcra::{Gcra, Quota, Ticks};
/// use std::time::Duration;
///
/// let gcra = Gcra::new(&Quota::per_second(10)?);      // T = 100 ms, B = 10, ticks are ns
/// let step = gcra.decide(Ticks::ZERO, 0, 1)?;           // empty key at t = 0
/// assert!(step.decision.allowed);
/// assert_eq!(step.decision.remaining(), Some(9));
/// assert_eq!(step.new_tat, Some(Ticks::from(100_000_000)));
///
/// // 3 per second: T = 333,333,333 + 1/3 ns, carried exactly.
/// let gcra = Gcra::new(&Quota::per_second(3)?);
/// assert_eq!(gcra.denominator(), 3);
/// let tat = gcra.decide(Ticks::ZERO, 0, 2)?.new_tat.unwrap();
/// assert_eq!(tat, Ticks { whole: 666_666_666, frac: 2 });
/// let tat = gcra.decide(tat, 0, 1)?.new_tat.unwrap();
/// assert_eq!(tat, Ticks::from(1_000_000_000)); // three tokens: exactly one second
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gcra {
    /// Whole ticks of `T`.
    interval: u64,
    /// Whole ticks of `B*T`.
    window: u64,
    burst: u32,
    tick_ns: u64,
    /// `floor((2^64 - 1) / interval)`: divides by the interval with one widening multiplication
    /// (used when `den == 1`, where `interval >= 1`).
    reciprocal: u64,
    /// The denominator of every fraction of a tick; 1 when `T` is a whole number of ticks.
    den: u64,
    /// `T` packed as `whole << 64 | frac` (see [`pack`]).
    interval_packed: u128,
    /// `B*T` packed as `whole << 64 | frac`.
    window_packed: u128,
    /// `T * den`: the interval in units of `1/den` tick.
    interval_scaled: u128,
    /// `B * T * den`.
    window_scaled: u128,
}

/// Whether a request fits, before the decision is spelled out (see [`Gcra::verdict`]).
/// `T` is a TAT: a `u64` of whole ticks when `den == 1`, a packed [`Ticks`] otherwise.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Verdict<T = u64> {
    /// The request fits in the burst window.
    pub(crate) allowed: bool,
    /// `max(tat, now)`: the TAT before the request.
    pub(crate) base: T,
    /// `base + cost * T`: the TAT if the request is granted.
    pub(crate) candidate: T,
}

/// What [`Gcra::decide`] returns: the decision, and the TAT to store if anything changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The decision to report.
    pub decision: Decision,
    /// `Some(tat')` when tokens were spent and the new TAT must be stored; `None` when nothing changes.
    pub new_tat: Option<Ticks>,
}

/// `t` as one `u128` whose order is the order of the times: `whole << 64 | frac`.
/// Valid for `frac < 2^64`; adding two packed values with `frac < den <= 2^52` never carries out
/// of the low half, so a carry is one comparison (see [`Gcra::carry`]).
#[inline]
pub(crate) fn pack(t: Ticks) -> u128 {
    (u128::from(t.whole) << 64) | u128::from(t.frac)
}

/// The inverse of [`pack`].
#[inline]
pub(crate) fn unpack(p: u128) -> Ticks {
    Ticks {
        whole: (p >> 64) as u64,
        frac: p as u64,
    }
}

impl Gcra {
    /// The rule for `quota` with nanosecond ticks (the in-memory stores' resolution).
    pub fn new(quota: &Quota) -> Gcra {
        let (num, den) = quota.emission_interval_exact();
        // A quota's denominator divides its rate (< 2^32) and its window is at most 2^62 ns.
        Gcra::from_ratio(num, u128::from(den), quota.burst(), 1)
    }

    /// The rule for `quota` with ticks of `tick` (e.g. one microsecond for the Redis store, whose
    /// server clock has microsecond resolution). The emission interval is kept exactly, as a whole
    /// number of ticks and a fraction (it may be below one tick); a zero tick, or one so coarse
    /// (above a millisecond) that the fraction's denominator could pass 2^52, is
    /// [`QuotaError::UnsupportedResolution`].
    pub fn with_resolution(quota: &Quota, tick: Duration) -> Result<Gcra, QuotaError> {
        let unsupported = || QuotaError::UnsupportedResolution {
            rate: quota.rate(),
            period: quota.period(),
            resolution: tick,
        };
        let tick_ns = u64::try_from(tick.as_nanos()).map_err(|_| unsupported())?;
        if tick_ns == 0 {
            return Err(unsupported());
        }
        // T in ticks = period_ns / (rate * tick_ns) = num / (den * tick_ns).
        let (num, den) = quota.emission_interval_exact();
        let den = u128::from(den) * u128::from(tick_ns);
        let common = gcd(num, den);
        let (num, den) = (num / common, den / common);
        if den > MAX_DENOMINATOR {
            return Err(unsupported());
        }
        Ok(Gcra::from_ratio(num, den, quota.burst(), tick_ns))
    }

    /// `T = num / den` ticks in lowest terms, `den <= 2^52`, `B * T <= 2^62` ticks.
    fn from_ratio(num: u128, den: u128, burst: u32, tick_ns: u64) -> Gcra {
        let window_scaled = u128::from(burst) * num;
        let (interval, interval_frac) = (num / den, num % den);
        let (window, window_frac) = (window_scaled / den, window_scaled % den);
        // A valid Quota keeps B * T <= MAX_WINDOW (2^62 ns), so every whole part fits in a u64.
        let interval = Ticks {
            whole: interval as u64,
            frac: interval_frac as u64,
        };
        let window = Ticks {
            whole: window as u64,
            frac: window_frac as u64,
        };
        Gcra {
            interval: interval.whole,
            window: window.whole,
            burst,
            tick_ns,
            reciprocal: u64::MAX / interval.whole.max(1),
            den: den as u64,
            interval_packed: pack(interval),
            window_packed: pack(window),
            interval_scaled: num,
            window_scaled,
        }
    }

    /// The emission interval `T` in ticks.
    pub fn interval_ticks(&self) -> Ticks {
        unpack(self.interval_packed)
    }

    /// The burst window `B*T` in ticks.
    pub fn window_ticks(&self) -> Ticks {
        unpack(self.window_packed)
    }

    /// The denominator of every fraction of a tick: TATs are kept in steps of `1 / den` tick.
    /// 1 when the emission interval is a whole number of ticks.
    pub fn denominator(&self) -> u64 {
        self.den
    }

    /// Whether the emission interval is a whole number of ticks (`den == 1`): then every TAT is a
    /// whole number of ticks and fits in one `u64`.
    pub fn is_whole(&self) -> bool {
        self.den == 1
    }

    /// The burst `B`.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The length of one tick.
    pub fn tick(&self) -> Duration {
        Duration::from_nanos(self.tick_ns)
    }

    /// Decides a request of `cost` tokens at `now` against the stored `tat` (both in ticks).
    pub fn decide(&self, tat: Ticks, now: u64, cost: u32) -> Result<Step, GcraError> {
        if self.is_whole() {
            let tat = tat.whole.saturating_add(tat.frac);
            let verdict = self.verdict(tat, now, cost)?;
            let new_tat = (verdict.allowed && cost > 0).then_some(Ticks::from(verdict.candidate));
            return Ok(Step {
                decision: self.report(verdict, now),
                new_tat,
            });
        }
        let tat = pack(self.normalize(tat));
        let verdict = self.verdict_exact(tat, now, self.exact_step(cost)?);
        let new_tat = (verdict.allowed && cost > 0).then_some(unpack(verdict.candidate));
        Ok(Step {
            decision: self.report_exact(verdict, now),
            new_tat,
        })
    }

    /// `t` with `frac < den`, the excess carried into `whole` (saturating at the end of time).
    fn normalize(&self, t: Ticks) -> Ticks {
        if t.frac < self.den {
            return t;
        }
        Ticks {
            whole: t.whole.saturating_add(t.frac / self.den),
            frac: t.frac % self.den,
        }
    }

    /// The decision alone, for `den == 1`: whether the request fits, and the TATs involved. Cheap,
    /// so a compare-and-swap loop can retry it without building a [`Decision`] each time.
    #[inline]
    pub(crate) fn verdict(&self, tat: u64, now: u64, cost: u32) -> Result<Verdict, GcraError> {
        self.admissible(cost)?;
        Ok(self.verdict_within(tat, now, cost))
    }

    /// Whether a request of `cost` can ever be allowed: [`GcraError::InsufficientCapacity`] when
    /// it exceeds the burst. Checked once per decision, before any state is read.
    #[inline]
    pub(crate) fn admissible(&self, cost: u32) -> Result<(), GcraError> {
        if cost > self.burst {
            return Err(self.insufficient(cost));
        }
        Ok(())
    }

    /// [`verdict`](Self::verdict) for a cost already found [`admissible`](Self::admissible).
    #[inline]
    pub(crate) fn verdict_within(&self, tat: u64, now: u64, cost: u32) -> Verdict {
        let base = tat.max(now);
        let candidate = base.saturating_add(u64::from(cost) * self.interval);
        Verdict {
            allowed: candidate - now <= self.window,
            base,
            candidate,
        }
    }

    /// The full [`Decision`] for a verdict of [`verdict`](Self::verdict) reached at `now`.
    #[inline]
    pub(crate) fn report(&self, v: Verdict, now: u64) -> Decision {
        let (tat_after, retry_after) = if v.allowed {
            (v.candidate, None)
        } else {
            (v.base, Some(self.ticks(v.candidate - self.window - now)))
        };
        let reset = tat_after - now;
        let remaining = self.whole_intervals(self.window.saturating_sub(reset));
        Decision::new(
            v.allowed,
            self.burst,
            remaining,
            retry_after,
            self.ticks(reset),
        )
    }

    #[cold]
    fn insufficient(&self, cost: u32) -> GcraError {
        GcraError::InsufficientCapacity {
            cost,
            burst: self.burst,
        }
    }

    /// The TAT a cost-`cost` request adds, `cost * T` in ticks, packed; `cost > B` is
    /// [`GcraError::InsufficientCapacity`]. Depends only on the cost, so a compare-and-swap loop
    /// computes it once.
    #[inline]
    pub(crate) fn exact_step(&self, cost: u32) -> Result<u128, GcraError> {
        self.admissible(cost)?;
        Ok(self.exact_step_within(cost))
    }

    /// [`exact_step`](Self::exact_step) for a cost already found [`admissible`](Self::admissible).
    pub(crate) fn exact_step_within(&self, cost: u32) -> u128 {
        if cost == 1 {
            return self.interval_packed;
        }
        // cost * T * den <= B * T * den: no overflow.
        let scaled = u128::from(cost) * self.interval_scaled;
        let den = u128::from(self.den);
        ((scaled / den) << 64) | (scaled % den)
    }

    /// `tat - cost * T` for `den == 1`: the TAT before a grant of `cost` tokens that moved it to
    /// `tat` (see [`TatCell::refund`](super::cell::TatCell::refund)). Saturates at zero.
    #[inline]
    pub(crate) fn refund(&self, tat: u64, cost: u32) -> u64 {
        tat.saturating_sub(u64::from(cost).saturating_mul(self.interval))
    }

    /// `tat - step` for packed values whose fractions are below `den` (`step` from
    /// [`exact_step`](Self::exact_step)), with the borrow taken in units of `1/den` tick.
    /// Saturates at zero.
    #[inline]
    pub(crate) fn refund_exact(&self, tat: u128, step: u128) -> u128 {
        if tat < step {
            return 0;
        }
        let difference = tat - step;
        if (tat as u64) < (step as u64) {
            // The low half borrowed 2^64; the fraction borrows `den` instead.
            difference - ((1u128 << 64) - u128::from(self.den))
        } else {
            difference
        }
    }

    /// `t` (a packed sum of two values with fractions below `den`) with its fraction below `den`.
    #[inline]
    fn carry(&self, t: u128) -> u128 {
        if (t as u64) >= self.den {
            // frac - den in the low half, + 1 in the high half.
            t.saturating_add((1u128 << 64) - u128::from(self.den))
        } else {
            t
        }
    }

    /// The decision alone for any `den`: `tat` and the result are packed [`Ticks`] and `step`
    /// comes from [`exact_step`](Self::exact_step). Additions and comparisons only.
    #[inline]
    pub(crate) fn verdict_exact(&self, tat: u128, now: u64, step: u128) -> Verdict<u128> {
        let now = u128::from(now) << 64;
        let base = tat.max(now);
        let candidate = self.carry(base.saturating_add(step));
        Verdict {
            allowed: candidate - now <= self.window_packed,
            base,
            candidate,
        }
    }

    /// The full [`Decision`] for a verdict of [`verdict_exact`](Self::verdict_exact) reached at `now`.
    #[inline]
    pub(crate) fn report_exact(&self, v: Verdict<u128>, now: u64) -> Decision {
        let den = u128::from(self.den);
        // In units of 1/den tick: at most 2^64 * 2^52 + 2^52, no overflow.
        let scaled = |p: u128| (p >> 64) * den + (p & u128::from(u64::MAX));
        let now = u128::from(now) * den;
        let (tat_after, retry_after) = if v.allowed {
            (v.candidate, None)
        } else {
            let late = scaled(v.candidate) - self.window_scaled - now;
            (v.base, Some(self.ticks_ceil(late)))
        };
        let reset = scaled(tat_after) - now;
        let remaining = self.window_scaled.saturating_sub(reset) / self.interval_scaled;
        Decision::new(
            v.allowed,
            self.burst,
            // At most B.
            remaining as u32,
            retry_after,
            self.ticks_ceil(reset),
        )
    }

    /// `floor(x / interval)` for `x <= window`, exact, without a hardware division on the hot path.
    ///
    /// With `m = floor((2^64 - 1) / T)`, `(x * m) >> 64` lies in `[x/T - x/2^64 - 1, x/T]`; as
    /// `x <= window <= 2^62`, that is `floor(x/T)` or one less, and one comparison corrects it.
    #[inline]
    fn whole_intervals(&self, x: u64) -> u32 {
        let x = x.min(self.window);
        let mut q = ((u128::from(x) * u128::from(self.reciprocal)) >> 64) as u64;
        if (q + 1) * self.interval <= x {
            q += 1;
        }
        q as u32
    }

    #[inline]
    fn ticks(&self, t: u64) -> Duration {
        if self.tick_ns == 1 {
            Duration::from_nanos(t)
        } else {
            Duration::from_nanos(t.saturating_mul(self.tick_ns))
        }
    }

    /// `scaled / den` ticks (a duration in units of `1/den` tick), rounded up to the tick.
    fn ticks_ceil(&self, scaled: u128) -> Duration {
        let ticks = scaled.div_ceil(u128::from(self.den));
        self.ticks(u64::try_from(ticks).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn t(whole: u64) -> Ticks {
        Ticks::from(whole)
    }

    #[test]
    fn denied_requests_report_when_to_come_back() {
        let g = Gcra::new(&Quota::per_second(5).unwrap());
        let full = g.decide(t(0), 0, 5).unwrap();
        assert_eq!(full.new_tat, Some(t(1000 * MS)));
        let denied = g.decide(t(1000 * MS), 0, 2).unwrap();
        assert!(!denied.decision.allowed);
        assert_eq!(denied.new_tat, None);
        assert_eq!(
            denied.decision.retry_after,
            Some(Duration::from_millis(400))
        );
        assert_eq!(denied.decision.remaining, 0);
        assert_eq!(denied.decision.reset_after, Duration::from_secs(1));
        // Waiting exactly retry_after is enough.
        assert!(
            g.decide(t(1000 * MS), 400 * MS, 2)
                .unwrap()
                .decision
                .allowed
        );
        assert!(
            !g.decide(t(1000 * MS), 400 * MS - 1, 2)
                .unwrap()
                .decision
                .allowed
        );
    }

    #[test]
    fn cost_is_checked_against_the_whole_request() {
        // One token left: a cost-2 request is denied even though "now >= tat - tau" holds.
        let g = Gcra::new(&Quota::per_second(10).unwrap());
        let tat = t(900 * MS); // 9 spent at t=0
        assert!(!g.decide(tat, 0, 2).unwrap().decision.allowed);
        assert!(g.decide(tat, 0, 1).unwrap().decision.allowed);
        assert_eq!(
            g.decide(tat, 0, 11),
            Err(GcraError::InsufficientCapacity {
                cost: 11,
                burst: 10
            })
        );
        let g = Gcra::new(&Quota::per_second(3).unwrap());
        assert_eq!(
            g.decide(tat, 0, 4),
            Err(GcraError::InsufficientCapacity { cost: 4, burst: 3 })
        );
    }

    #[test]
    fn peek_changes_nothing() {
        let g = Gcra::new(&Quota::per_second(10).unwrap());
        let s = g.decide(t(300 * MS), 0, 0).unwrap();
        assert!(s.decision.allowed);
        assert_eq!(s.new_tat, None);
        assert_eq!(s.decision.remaining, 7);
        let g = Gcra::new(&Quota::per_second(3).unwrap());
        let s = g.decide(t(MS), 0, 0).unwrap();
        assert!(s.decision.allowed && s.new_tat.is_none());
    }

    #[test]
    fn fractional_intervals_carry_exactly() {
        // 3 per second, burst 3: T = 10^9/3 ns. Spending 3 one at a time lands on exactly 1 s,
        // where rounding T down would land 1 ns early and admit a fourth token 1 ns too soon.
        let g = Gcra::new(&Quota::per_second(3).unwrap());
        assert_eq!(g.denominator(), 3);
        assert_eq!(
            g.interval_ticks(),
            Ticks {
                whole: 333_333_333,
                frac: 1
            }
        );
        assert_eq!(g.window_ticks(), t(1_000_000_000));
        let mut tat = Ticks::ZERO;
        for remaining in [2, 1, 0] {
            let s = g.decide(tat, 0, 1).unwrap();
            assert!(s.decision.allowed);
            assert_eq!(s.decision.remaining, remaining);
            tat = s.new_tat.unwrap();
        }
        assert_eq!(tat, t(1_000_000_000));
        let denied = g.decide(tat, 0, 1).unwrap();
        assert!(!denied.decision.allowed);
        // 333,333,333 1/3 ns, rounded up: waiting what the client is told is enough.
        let wait = denied.decision.retry_after.unwrap();
        assert_eq!(wait, Duration::from_nanos(333_333_334));
        assert!(
            !g.decide(tat, 333_333_333, 1).unwrap().decision.allowed,
            "one third of a ns early"
        );
        assert!(g.decide(tat, 333_333_334, 1).unwrap().decision.allowed);
        // Cost n carries n/3 ns: two tokens are 666,666,666 2/3 ns.
        let s = g.decide(t(0), 0, 2).unwrap();
        assert_eq!(
            s.new_tat,
            Some(Ticks {
                whole: 666_666_666,
                frac: 2
            })
        );
        assert_eq!(
            s.decision.reset_after,
            Duration::from_nanos(666_666_667),
            "rounded up"
        );
        // An unnormalised TAT denotes the time it spells.
        let odd = Ticks {
            whole: 666_666_666,
            frac: 5,
        };
        assert_eq!(
            g.decide(odd, 0, 0).unwrap(),
            g.decide(
                Ticks {
                    whole: 666_666_667,
                    frac: 2
                },
                0,
                0
            )
            .unwrap()
        );
    }

    #[test]
    fn microsecond_resolution_keeps_the_fraction() {
        let g = Gcra::with_resolution(&Quota::per_second(3).unwrap(), Duration::from_micros(1))
            .unwrap();
        assert_eq!(
            (g.interval_ticks(), g.denominator()),
            (
                Ticks {
                    whole: 333_333,
                    frac: 1
                },
                3
            )
        );
        let s = g.decide(t(0), 0, 1).unwrap();
        assert_eq!(s.decision.reset_after, Duration::from_micros(333_334));
        // Faster than one token per tick: T = 1/2 µs.
        let g = Gcra::with_resolution(
            &Quota::per_second(2_000_000).unwrap(),
            Duration::from_micros(1),
        )
        .unwrap();
        assert_eq!(
            (g.interval_ticks(), g.denominator()),
            (Ticks { whole: 0, frac: 1 }, 2)
        );
        let s = g.decide(t(0), 0, 3).unwrap();
        assert_eq!(s.new_tat, Some(Ticks { whole: 1, frac: 1 }));
        // A whole number of ticks stays whole.
        let g = Gcra::with_resolution(&Quota::per_second(8).unwrap(), Duration::from_micros(1))
            .unwrap();
        assert!(g.is_whole());
        assert_eq!(g.interval_ticks(), t(125_000));
        // 2^32 - 5 (a prime) per 7^12 ns: at 1 s ticks the denominator is about 2^62.
        let coprime = Quota::new(4_294_967_291, Duration::from_nanos(7u64.pow(12))).unwrap();
        assert!(Gcra::with_resolution(&coprime, Duration::from_millis(1)).is_ok());
        for tick in [Duration::ZERO, Duration::from_secs(1)] {
            assert!(matches!(
                Gcra::with_resolution(&coprime, tick),
                Err(QuotaError::UnsupportedResolution { .. })
            ));
        }
    }

    #[test]
    fn both_paths_agree_when_the_interval_is_whole() {
        let g = Gcra::new(&Quota::per_second(10).unwrap().with_burst(7).unwrap());
        for tat in [0, 50 * MS, 300 * MS, 700 * MS, 900 * MS] {
            for now in [0, 10 * MS, 400 * MS] {
                for cost in 0..=7 {
                    let fast = g.verdict(tat, now, cost).unwrap();
                    let exact = g.verdict_exact(pack(t(tat)), now, g.exact_step(cost).unwrap());
                    assert_eq!(fast.allowed, exact.allowed);
                    assert_eq!(g.report(fast, now), g.report_exact(exact, now));
                }
            }
        }
    }

    #[test]
    fn whole_intervals_is_exact_division() {
        for (rate, period, burst) in [
            (3u32, 1u64, 7u32),
            (7, 60, 1000),
            (1, 3600, 1),
            (1000, 1, 4_000_000),
            (997, 1, u32::MAX / 2),
        ] {
            let q = Quota::new(rate, Duration::from_secs(period)).unwrap();
            let Ok(q) = q.with_burst(burst) else { continue };
            let g = Gcra::new(&q);
            let t = g.interval;
            for k in [
                0u64,
                1,
                2,
                u64::from(burst) / 2,
                u64::from(burst) - 1,
                u64::from(burst),
            ] {
                for delta in [0i64, 1, -1, (t / 2) as i64] {
                    let x = (k * t).saturating_add_signed(delta).min(g.window);
                    assert_eq!(u64::from(g.whole_intervals(x)), x / t, "x={x} t={t}");
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn whole_intervals_matches_division(interval in 1u64..(1 << 40), burst in 1u32..(1 << 22), frac in 0.0f64..=1.0) {
            let window = interval.saturating_mul(u64::from(burst)).min(1 << 62);
            let g = Gcra::from_ratio(u128::from(interval), 1, burst, 1);
            let g = Gcra { window, ..g };
            let x = (window as f64 * frac) as u64;
            for x in [x, x.saturating_sub(1), (x + 1).min(window), window] {
                proptest::prop_assert_eq!(u64::from(g.whole_intervals(x)), x / interval);
            }
        }
    }
}
