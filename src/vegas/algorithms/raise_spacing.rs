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
///
/// With [`RaiseSpacing::from_start`], the start counts as a raise: a baseline just learned is
/// not stale, so the first raise to a stale baseline's RTT also waits a gap. An instance that
/// joins a fleet learns its first baseline in the queue the others keep, overshoots it in slow
/// start and cuts; the RTT then falls by less than its own share of
/// the queue (the rest is the others'), which reads as a stale baseline, and an immediate raise
/// took the fleet's queue into the newcomer's baseline and gave it back the limit it had cut
/// (in `vegas_sim --fleet`, 12 ms raised to 19 ms against a true 9 ms, the newcomer then holding
/// 5-6 permits beside three at 1).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RaiseSpacing {
    /// The sample count at the last raise; `None` before the first, which is allowed at once.
    last: Option<u64>,
    /// The current gap, in rounds of the limit.
    gap: f64,
}

impl Default for RaiseSpacing {
    /// The first raise is allowed at once: the small raises for an RTT that grows with the load,
    /// which a lone instance on a busy host needs from its first cut (capped at the band, they
    /// cannot take a fleet's queue in).
    fn default() -> Self {
        Self {
            last: None,
            gap: GAP,
        }
    }
}

impl RaiseSpacing {
    /// The start counts as a raise: the first one waits a gap too.
    pub(crate) fn from_start() -> Self {
        Self {
            last: Some(0),
            gap: GAP,
        }
    }

    /// Whether a raise is allowed at sample count `now` with limit `current` (a round is
    /// `current` samples); if so, counts it: at least `GAP` rounds after the previous raise (or
    /// the start), and a raise within `RESET` gaps of the previous one doubles the gap (up to
    /// `GAP_MAX`).
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
    fn the_first_raise_waits_a_gap_after_the_start_and_the_next_another() {
        let mut spacing = RaiseSpacing::from_start();
        assert!(!spacing.allow(0, 4), "a baseline just learned is not stale");
        assert!(
            !spacing.allow(199, 4),
            "50 rounds of 4 samples not yet passed"
        );
        assert!(spacing.allow(200, 4));
        // Within 4 gaps of the start: the gap doubles to 100 rounds.
        assert!(!spacing.allow(200 + 399, 4));
        assert!(spacing.allow(200 + 400, 4));
    }

    #[test]
    fn raises_that_keep_coming_double_the_gap_up_to_its_cap() {
        let mut spacing = RaiseSpacing::from_start();
        let mut now = 0;
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
    fn by_default_the_first_raise_is_allowed_at_once() {
        let mut spacing = RaiseSpacing::default();
        assert!(spacing.allow(10, 4));
        assert!(!spacing.allow(10 + 199, 4));
        assert!(spacing.allow(10 + 200, 4));
    }

    #[test]
    fn a_raise_long_after_the_previous_one_resets_the_gap() {
        let mut spacing = RaiseSpacing::from_start();
        assert!(spacing.allow(1_000, 1)); // long after the start: the gap stays 50
        assert!(spacing.allow(1_060, 1)); // within 4 gaps: the gap doubles to 100
        assert!(!spacing.allow(1_060 + 99, 1));
        assert!(spacing.allow(1_060 + 100 * 4, 1)); // 4 gaps later: back to 50
        assert!(spacing.allow(1_060 + 400 + 50, 1));
    }
}
