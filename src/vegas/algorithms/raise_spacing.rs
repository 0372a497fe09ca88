//! Spacing between raises of the Vegas baseline.
//!
//! Alone in front of a dependency, a baseline that is too low (the dependency got slower, or
//! its RTT grows with its load) needs one raise, not a series. In a fleet, one instance cannot
//! always tell that from the queue the other instances keep: when it alone lowers its
//! concurrency, the RTT stays about where it was in both cases. A baseline raised on the others'
//! queue lets the instance grow, which lengthens the queue, which its next raise takes in again:
//! a ratchet, which leaves the instances that kept the true baseline at a permit each. Spacing
//! the raises breaks the ratchet and costs the lone instance nothing.

/// The fewest rounds between two raises.
const GAP: f64 = 50.0;
/// The most rounds between two raises.
const GAP_MAX: f64 = 200.0;
/// A raise more than this many gaps after the previous one resets the gap to [`GAP`]; one
/// sooner doubles it.
const RESET: u64 = 4;

/// When the baseline may next be raised, counted in samples fed to the algorithm.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RaiseSpacing {
    /// The sample count at the last raise; `None` before the first.
    last: Option<u64>,
    /// The current gap, in rounds of the limit.
    gap: f64,
}

impl Default for RaiseSpacing {
    fn default() -> Self {
        Self {
            last: None,
            gap: GAP,
        }
    }
}

impl RaiseSpacing {
    /// Whether a raise is allowed at sample count `now` with limit `current` (a round is
    /// `current` samples); if so, counts it: at least `GAP` rounds after the previous raise,
    /// and a raise within `RESET` gaps of the previous one doubles the gap (up to `GAP_MAX`).
    pub(crate) fn allow(&mut self, now: u64, current: usize) -> bool {
        let Some(last) = self.last else {
            self.last = Some(now);
            return true;
        };
        let since = now.saturating_sub(last);
        let gap = (self.gap * current.max(1) as f64) as u64;
        if since < gap {
            return false;
        }
        self.gap = if since < RESET * gap {
            (self.gap * 2.0).min(GAP_MAX)
        } else {
            GAP
        };
        self.last = Some(now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_raise_is_allowed_and_the_next_waits_a_gap() {
        let mut spacing = RaiseSpacing::default();
        assert!(spacing.allow(10, 4));
        assert!(
            !spacing.allow(10 + 199, 4),
            "50 rounds of 4 samples not yet passed"
        );
        assert!(spacing.allow(10 + 200, 4));
    }

    #[test]
    fn raises_that_keep_coming_double_the_gap_up_to_its_cap() {
        let mut spacing = RaiseSpacing::default();
        let mut now = 0;
        assert!(spacing.allow(now, 1));
        let mut gaps = Vec::new();
        for _ in 0..8 {
            // Ask every sample: the raise comes as soon as the gap allows.
            let start = now;
            now += 1;
            while !spacing.allow(now, 1) {
                now += 1;
            }
            gaps.push(now - start);
        }
        assert_eq!(gaps, [50, 100, 200, 200, 200, 200, 200, 200]);
    }

    #[test]
    fn a_raise_long_after_the_previous_one_resets_the_gap() {
        let mut spacing = RaiseSpacing::default();
        assert!(spacing.allow(0, 1));
        assert!(spacing.allow(60, 1)); // within 4 gaps: the gap doubles to 100
        assert!(!spacing.allow(60 + 99, 1));
        assert!(spacing.allow(60 + 100 * 4, 1)); // 4 gaps later: back to 50
        assert!(spacing.allow(60 + 400 + 50, 1));
    }
}
