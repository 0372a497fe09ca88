//! [`RetryBudget`]: retries limited to a share of recent requests plus a small floor per
//! second, over a sliding window, so retries cannot multiply the load on a failing dependency.

use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::error::ConfigError;

/// Number of sub-windows the sliding window is divided into.
const SLOTS: usize = 10;

/// A retry budget shared by every call to one dependency (wrap it in an `Arc`).
///
/// Over the last `window` (sliding, in steps of `window / 10`), retries are allowed while
///
/// ```text
/// retries < min_retries_per_sec * window_secs + retry_ratio * requests
/// ```
///
/// where `requests` counts first attempts ([`deposit`](Self::deposit)) and `retries` counts
/// granted retries ([`try_withdraw`](Self::try_withdraw)). A dependency that fails completely
/// therefore receives at most `requests * (1 + retry_ratio) + min_retries_per_sec * window_secs`
/// calls per window.
///
/// Time is an argument, so the budget is deterministic under test; the window starts at the
/// first instant it is given. State is a few counters behind one short `parking_lot` lock.
///
/// ```
/// use std::time::{Duration, Instant};
/// use flowguard::backoff::RetryBudget;
///
/// // 20% extra load, plus 1 retry per second over a 10 s window.
/// let budget = RetryBudget::new(Duration::from_secs(10), 1, 0.2)?;
/// let now = Instant::now();
/// for _ in 0..10 {
///     budget.deposit(now);
/// }
/// // floor 1/s * 10 s = 10, plus 20% of 10 requests = 2.
/// let granted = (0..100).filter(|_| budget.try_withdraw(now)).count();
/// assert_eq!(granted, 12);
/// # Ok::<(), flowguard::backoff::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct RetryBudget {
    slot_len: Duration,
    reserve: f64,
    retry_ratio: f64,
    window: Duration,
    state: Mutex<Window>,
}

#[derive(Debug, Default)]
struct Window {
    origin: Option<Instant>,
    slots: [Slot; SLOTS],
}

#[derive(Debug, Default, Clone, Copy)]
struct Slot {
    epoch: u64,
    requests: u64,
    retries: u64,
}

impl RetryBudget {
    /// A budget over a sliding `window` (a whole number of milliseconds in `1s..=60s`),
    /// granting `min_retries_per_sec` retries per second regardless of traffic plus
    /// `retry_ratio` retries per request (`0.0..=1000.0`; `0.2` = at most 20% extra load).
    ///
    /// # Errors
    /// [`ConfigError::InvalidBudgetWindow`] or [`ConfigError::InvalidRetryRatio`].
    pub fn new(
        window: Duration,
        min_retries_per_sec: u32,
        retry_ratio: f64,
    ) -> Result<Self, ConfigError> {
        if window < Duration::from_secs(1)
            || window > Duration::from_secs(60)
            || !window.subsec_nanos().is_multiple_of(1_000_000)
        {
            return Err(ConfigError::InvalidBudgetWindow(window));
        }
        if !(retry_ratio.is_finite() && (0.0..=1000.0).contains(&retry_ratio)) {
            return Err(ConfigError::InvalidRetryRatio(retry_ratio));
        }
        Ok(Self {
            slot_len: window / SLOTS as u32,
            reserve: f64::from(min_retries_per_sec) * window.as_secs_f64(),
            retry_ratio,
            window,
            state: Mutex::new(Window::default()),
        })
    }

    /// The sliding window length.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// Records a first attempt (not a retry) at `now`: it earns `retry_ratio` retries.
    pub fn deposit(&self, now: Instant) {
        let mut w = self.state.lock();
        let epoch = w.epoch(now, self.slot_len);
        w.slot(epoch).requests += 1;
    }

    /// Takes one retry from the budget at `now`; `false` when the budget is exhausted.
    pub fn try_withdraw(&self, now: Instant) -> bool {
        let mut w = self.state.lock();
        let epoch = w.epoch(now, self.slot_len);
        if self.remaining_in(&w, epoch) == 0 {
            return false;
        }
        w.slot(epoch).retries += 1;
        true
    }

    /// How many retries [`try_withdraw`](Self::try_withdraw) would grant at `now`.
    pub fn remaining(&self, now: Instant) -> u64 {
        let mut w = self.state.lock();
        let epoch = w.epoch(now, self.slot_len);
        self.remaining_in(&w, epoch)
    }

    fn remaining_in(&self, w: &Window, epoch: u64) -> u64 {
        let (requests, retries) = w.totals(epoch);
        // Precision: counts stay far below 2^53.
        let allowed = (self.reserve + self.retry_ratio * requests as f64).floor() as u64;
        allowed.saturating_sub(retries)
    }
}

impl Default for RetryBudget {
    /// Finagle/linkerd defaults: 10 s window, 10 retries per second, 20% of requests.
    fn default() -> Self {
        Self {
            slot_len: Duration::from_secs(1),
            reserve: 100.0,
            retry_ratio: 0.2,
            window: Duration::from_secs(10),
            state: Mutex::new(Window::default()),
        }
    }
}

impl Window {
    fn epoch(&mut self, now: Instant, slot_len: Duration) -> u64 {
        let origin = *self.origin.get_or_insert(now);
        let elapsed = now.saturating_duration_since(origin).as_nanos();
        u64::try_from(elapsed / slot_len.as_nanos()).unwrap_or(u64::MAX)
    }

    fn slot(&mut self, epoch: u64) -> &mut Slot {
        let slot = &mut self.slots[(epoch % SLOTS as u64) as usize];
        if slot.epoch != epoch {
            *slot = Slot {
                epoch,
                ..Slot::default()
            };
        }
        slot
    }

    fn totals(&self, epoch: u64) -> (u64, u64) {
        self.slots
            .iter()
            .filter(|s| s.epoch <= epoch && epoch - s.epoch < SLOTS as u64)
            .fold((0, 0), |(q, r), s| (q + s.requests, r + s.retries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_name_the_value() {
        assert_eq!(
            RetryBudget::new(Duration::from_millis(500), 1, 0.1).err(),
            Some(ConfigError::InvalidBudgetWindow(Duration::from_millis(500)))
        );
        assert!(matches!(
            RetryBudget::new(Duration::from_secs(10), 1, f64::NAN),
            Err(ConfigError::InvalidRetryRatio(_))
        ));
        assert!(RetryBudget::new(Duration::from_secs(10), 1, -0.1).is_err());
        assert!(RetryBudget::new(Duration::from_secs(61), 1, 0.1).is_err());
    }

    #[test]
    fn window_slides_and_refills() {
        let b = RetryBudget::new(Duration::from_secs(10), 0, 0.5).unwrap();
        let t0 = Instant::now();
        for _ in 0..10 {
            b.deposit(t0);
        }
        assert_eq!(b.remaining(t0), 5);
        assert!((0..5).all(|_| b.try_withdraw(t0)));
        assert!(!b.try_withdraw(t0));
        // Still inside the window 9.9 s later.
        assert!(!b.try_withdraw(t0 + Duration::from_millis(9_900)));
        // The deposits and withdrawals of t0 have left the window.
        assert_eq!(b.remaining(t0 + Duration::from_secs(10)), 0);
        b.deposit(t0 + Duration::from_secs(10));
        b.deposit(t0 + Duration::from_secs(10));
        assert_eq!(b.remaining(t0 + Duration::from_secs(10)), 1);
    }

    #[test]
    fn floor_alone_grants_min_per_sec_times_window() {
        let b = RetryBudget::new(Duration::from_secs(2), 3, 0.0).unwrap();
        let t0 = Instant::now();
        assert_eq!((0..100).filter(|_| b.try_withdraw(t0)).count(), 6);
        // Earlier instants than the origin count as the origin.
        assert!(!b.try_withdraw(t0 - Duration::from_secs(1)));
    }

    #[test]
    fn default_matches_new() {
        let d = RetryBudget::default();
        let n = RetryBudget::new(Duration::from_secs(10), 10, 0.2).unwrap();
        let t0 = Instant::now();
        assert_eq!(d.remaining(t0), n.remaining(t0));
        assert_eq!(d.window(), n.window());
    }
}
