//! [`Reservoir`]: one key's local tokens in two-tier mode, as a pure state machine of time.
//!
//! Tokens arrive in lots (one per granted reservation), each with the local time after which it
//! is stale. Spending takes from the oldest lot first. At most one reservation is in flight.

use std::time::Duration;

use super::config::Config;
use crate::gcra::{Decision, Degradation};

/// Tokens from one reservation and when they go stale (nanoseconds of the limiter's clock).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Lot {
    tokens: u32,
    expires_at: u64,
}

/// One key's local state.
#[derive(Debug, Default)]
pub(crate) struct Reservoir {
    /// Oldest first. With one reservation in flight at a time, two lots suffice (older ones merge).
    lots: [Lot; 2],
    /// The shared store denied a reservation: deny locally, without asking again, until then.
    denied_until: u64,
    /// A reservation is in flight.
    refilling: bool,
    /// When the global burst is full again, according to the last reservation.
    reset_at: u64,
    /// Set when the last reservation was answered by the store's failure policy.
    degraded: Option<Degradation>,
}

/// What a request should do, as decided by [`Reservoir::take`].
#[derive(Debug, PartialEq)]
pub(crate) enum Take {
    /// Spent locally. `refill` asks the caller to start a background reservation (already marked in flight).
    Granted { decision: Decision, refill: bool },
    /// Denied locally, with the store's `retry_after`.
    Denied(Decision),
    /// Not enough tokens and nothing in flight: the caller must reserve now (marked in flight).
    Reserve,
    /// Not enough tokens and a reservation is in flight: wait for it, then take again.
    Wait,
}

impl Reservoir {
    /// Tokens that are not stale at `now`; drops the stale ones.
    fn fresh_tokens(&mut self, now: u64) -> u32 {
        for lot in &mut self.lots {
            if now >= lot.expires_at {
                lot.tokens = 0;
            }
        }
        if self.lots[0].tokens == 0 {
            self.lots = [self.lots[1], Lot::default()];
        }
        self.lots[0].tokens + self.lots[1].tokens
    }

    fn decision(
        &self,
        allowed: bool,
        remaining: u32,
        retry_after: Option<u64>,
        cfg: &Config,
        now: u64,
    ) -> Decision {
        let d = Decision::new(
            allowed,
            cfg.limit(),
            remaining,
            retry_after.map(Duration::from_nanos),
            Duration::from_nanos(self.reset_at.saturating_sub(now)),
        );
        match self.degraded {
            Some(how) => d.degraded(how),
            None => d,
        }
    }

    /// Decides `cost` (at most the batch) at `now` from local state alone.
    pub(crate) fn take(&mut self, cfg: &Config, now: u64, cost: u32) -> Take {
        let tokens = self.fresh_tokens(now);
        if tokens >= cost {
            let mut left = cost;
            for lot in &mut self.lots {
                let spend = left.min(lot.tokens);
                lot.tokens -= spend;
                left -= spend;
            }
            let remaining = tokens - cost;
            let refill = cost > 0
                && remaining < cfg.refill_below()
                && !self.refilling
                && now >= self.denied_until;
            self.refilling |= refill;
            return Take::Granted {
                decision: self.decision(true, remaining, None, cfg, now),
                refill,
            };
        }
        if now < self.denied_until {
            return Take::Denied(self.decision(
                false,
                tokens,
                Some(self.denied_until - now),
                cfg,
                now,
            ));
        }
        if self.refilling {
            return Take::Wait;
        }
        self.refilling = true;
        Take::Reserve
    }

    /// Applies the store's answer to a reservation of `cfg.batch()` tokens, received at `now`;
    /// returns whether it was applied.
    ///
    /// An answer of the store's failure policy (`answer.degraded`: the store did not answer in
    /// time, or is skipped after a failure) is not applied while fresh tokens are on hand: those
    /// were granted by the store and keep being served as such, and the next take below the
    /// threshold asks again, as after a failed reservation. So a refill that comes back late
    /// (a busy client reading a healthy store's reply after the timeout) turns no decision into a
    /// failure policy's; only a reservoir that runs dry takes the policy's answer.
    pub(crate) fn reserved(&mut self, cfg: &Config, now: u64, answer: &Decision) -> bool {
        self.refilling = false;
        if answer.degraded.is_some() && self.fresh_tokens(now) > 0 {
            return false;
        }
        self.degraded = answer.degraded;
        self.reset_at = now.saturating_add(duration_nanos(answer.reset_after));
        if answer.allowed {
            self.denied_until = 0;
            self.fresh_tokens(now);
            let lot = Lot {
                tokens: cfg.batch(),
                expires_at: now.saturating_add(duration_nanos(cfg.max_token_age())),
            };
            if self.lots[1].tokens > 0 {
                // Three lots: merge the two older ones, keeping the earlier expiry.
                self.lots[0] = Lot {
                    tokens: self.lots[0].tokens + self.lots[1].tokens,
                    expires_at: self.lots[0].expires_at.min(self.lots[1].expires_at),
                };
                self.lots[1] = lot;
            } else if self.lots[0].tokens > 0 {
                self.lots[1] = lot;
            } else {
                self.lots[0] = lot;
            }
        } else {
            let wait = answer
                .retry_after
                .map_or(duration_nanos(cfg.interval()), duration_nanos);
            self.denied_until = now.saturating_add(wait.max(1));
        }
        true
    }

    /// The reservation failed (an error, not a denial): local tokens stay, the next take may retry.
    pub(crate) fn failed(&mut self) {
        self.refilling = false;
    }

    /// Carries no information at `now`: no fresh tokens, no denial in force, nothing in flight.
    pub(crate) fn is_idle(&self, now: u64) -> bool {
        !self.refilling
            && now >= self.denied_until
            && self
                .lots
                .iter()
                .all(|l| l.tokens == 0 || now >= l.expires_at)
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::gcra::{Quota, RateLimiter};

    const MS: u64 = 1_000_000;

    fn cfg() -> Config {
        // 1000/s, burst 100, batch 10, refill below 2, tokens live 100 ms.
        let quota = Quota::per_second(1000).unwrap().with_burst(100).unwrap();
        Config::new(&quota, 10, None, None).unwrap()
    }

    fn grant() -> Decision {
        let limiter =
            RateLimiter::builder(Quota::per_second(1000).unwrap().with_burst(100).unwrap())
                .clock(ManualClock::new())
                .build()
                .unwrap();
        limiter.check_n(10).unwrap()
    }

    fn deny(retry_ms: u64) -> Decision {
        Decision::new(
            false,
            100,
            0,
            Some(Duration::from_millis(retry_ms)),
            Duration::from_millis(100),
        )
    }

    #[test]
    fn an_empty_reservoir_asks_to_reserve_once_and_others_wait() {
        let (cfg, mut r) = (cfg(), Reservoir::default());
        assert_eq!(r.take(&cfg, 0, 1), Take::Reserve);
        assert_eq!(r.take(&cfg, 0, 1), Take::Wait);
        r.reserved(&cfg, 0, &grant());
        let Take::Granted { decision, refill } = r.take(&cfg, 0, 1) else {
            panic!()
        };
        assert!(decision.allowed && !refill);
        assert_eq!(decision.remaining, 9);
    }

    #[test]
    fn falling_below_the_threshold_starts_exactly_one_background_refill() {
        let (cfg, mut r) = (cfg(), Reservoir::default());
        r.take(&cfg, 0, 1);
        r.reserved(&cfg, 0, &grant());
        let refills: Vec<bool> = (0..10)
            .map(|_| match r.take(&cfg, 0, 1) {
                Take::Granted { refill, .. } => refill,
                other => panic!("{other:?}"),
            })
            .collect();
        // 10 tokens: after the 9th spend one is left (< 2): that take, and only it, starts a refill.
        assert_eq!(refills.iter().filter(|r| **r).count(), 1);
        assert!(refills[8]);
        // Empty with the refill in flight: wait for it.
        assert_eq!(r.take(&cfg, 0, 1), Take::Wait);
    }

    #[test]
    fn a_denied_reservation_denies_locally_until_retry_after() {
        let (cfg, mut r) = (cfg(), Reservoir::default());
        assert_eq!(r.take(&cfg, 0, 1), Take::Reserve);
        r.reserved(&cfg, 0, &deny(30));
        let Take::Denied(d) = r.take(&cfg, 10 * MS, 1) else {
            panic!()
        };
        assert_eq!(d.retry_after, Some(Duration::from_millis(20)));
        assert_eq!(
            r.take(&cfg, 30 * MS - 1, 1),
            Take::Denied(r.decision(false, 0, Some(1), &cfg, 30 * MS - 1))
        );
        assert_eq!(
            r.take(&cfg, 30 * MS, 1),
            Take::Reserve,
            "asks the store again only once retry_after has passed"
        );
    }

    #[test]
    fn stale_tokens_are_dropped() {
        let (cfg, mut r) = (cfg(), Reservoir::default());
        r.take(&cfg, 0, 1);
        r.reserved(&cfg, 0, &grant());
        assert!(matches!(r.take(&cfg, 99 * MS, 1), Take::Granted { .. }));
        assert!(!r.is_idle(99 * MS));
        assert!(r.is_idle(100 * MS), "tokens live max_token_age = 100 ms");
        assert_eq!(r.take(&cfg, 100 * MS, 1), Take::Reserve);
    }

    #[test]
    fn older_lots_are_spent_first_and_keep_their_expiry() {
        let (cfg, mut r) = (cfg(), Reservoir::default());
        r.take(&cfg, 0, 1);
        r.reserved(&cfg, 0, &grant()); // 10 tokens until 100 ms
        for _ in 0..9 {
            r.take(&cfg, 0, 1); // the 9th starts a refill
        }
        r.reserved(&cfg, 50 * MS, &grant()); // 1 old token (until 100 ms) + 10 new (until 150 ms)
        assert_eq!(r.fresh_tokens(50 * MS), 11);
        assert_eq!(r.fresh_tokens(100 * MS), 10);
        assert_eq!(r.fresh_tokens(150 * MS), 0);
    }

    #[test]
    fn a_late_refill_leaves_the_tokens_on_hand_undegraded() {
        let (cfg, mut r) = (cfg(), Reservoir::default());
        r.take(&cfg, 0, 1);
        r.reserved(&cfg, 0, &grant());
        for _ in 0..9 {
            r.take(&cfg, 0, 1); // the 9th starts a refill
        }
        // The refill timed out: the failure policy allowed it (fail open), or denied it.
        for late in [
            grant().degraded(Degradation::FailOpen),
            deny(30).degraded(Degradation::FailClosed),
        ] {
            assert!(!r.reserved(&cfg, MS, &late), "set aside");
        }
        let Take::Granted { decision, refill } = r.take(&cfg, MS, 1) else {
            panic!("the last token is still served")
        };
        assert_eq!(decision.degraded, None, "as the store granted it");
        assert!(refill, "and the refill is tried again");
        // Dry: the failure policy's answer is all there is, and it is taken.
        let late = grant().degraded(Degradation::FailOpen);
        assert!(r.reserved(&cfg, MS, &late));
        let Take::Granted { decision, .. } = r.take(&cfg, MS, 1) else {
            panic!("fail open")
        };
        assert_eq!(decision.degraded, Some(Degradation::FailOpen));
    }

    #[test]
    fn a_failed_reservation_keeps_the_tokens() {
        let (cfg, mut r) = (cfg(), Reservoir::default());
        r.take(&cfg, 0, 1);
        r.reserved(&cfg, 0, &grant());
        for _ in 0..9 {
            r.take(&cfg, 0, 1);
        }
        r.failed();
        let Take::Granted { refill, .. } = r.take(&cfg, 0, 1) else {
            panic!("the last token is still served")
        };
        assert!(refill, "and the background reservation is tried again");
        r.failed();
        assert_eq!(
            r.take(&cfg, 0, 1),
            Take::Reserve,
            "empty and nothing in flight: reserve inline"
        );
    }
}
