//! [`Decisions`]: the answers of a joint check, one per demand, kept inline for a few demands.

use std::time::Duration;

use crate::gcra::Decision;

/// Demands kept inline (no allocation) by [`Decisions`]; more go to the heap.
const INLINE: usize = 4;

/// Fills unused inline slots.
const UNUSED: Decision = Decision {
    allowed: false,
    limit: 0,
    remaining: 0,
    retry_after: None,
    reset_after: Duration::ZERO,
    degraded: None,
};

/// The answers of [`LimitSet::check_all`](super::LimitSet::check_all), one [`Decision`] per
/// demand, in the order of the demands. Up to four are kept inline, without allocating.
///
/// When [`allowed`](Self::allowed), every demand was granted and spent. Otherwise nothing was
/// spent (for sets that decide atomically), and each decision says whether its demand alone
/// would fit right now (`allowed`) or when it will ([`retry_after`](Decision::retry_after)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decisions {
    len: usize,
    inline: [Decision; INLINE],
    heap: Vec<Decision>,
}

impl Decisions {
    /// No decisions yet.
    pub(crate) fn with_capacity(demands: usize) -> Decisions {
        Decisions {
            len: 0,
            inline: [UNUSED; INLINE],
            heap: if demands > INLINE {
                Vec::with_capacity(demands)
            } else {
                Vec::new()
            },
        }
    }

    /// One decision.
    pub fn one(decision: Decision) -> Decisions {
        let mut decisions = Decisions::with_capacity(1);
        decisions.push(decision);
        decisions
    }

    /// The decisions of `decisions`, in order.
    pub fn from_slice(decisions: &[Decision]) -> Decisions {
        let mut out = Decisions::with_capacity(decisions.len());
        for d in decisions {
            out.push(*d);
        }
        out
    }

    /// Appends the next demand's decision.
    pub(crate) fn push(&mut self, decision: Decision) {
        if self.len < INLINE && self.heap.is_empty() {
            self.inline[self.len] = decision;
        } else {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.inline[..self.len]);
            }
            self.heap.push(decision);
        }
        self.len += 1;
    }

    /// The decisions, one per demand, in order.
    pub fn as_slice(&self) -> &[Decision] {
        if self.heap.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.heap
        }
    }

    /// Whether every demand was granted (and so spent).
    pub fn allowed(&self) -> bool {
        self.as_slice().iter().all(|d| d.allowed)
    }

    /// How many decisions there are.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The longest wait among the denied demands: once it has passed, each of them fits again
    /// (unless others spend meanwhile). `None` when none was denied with a wait.
    pub fn retry_after(&self) -> Option<Duration> {
        self.as_slice()
            .iter()
            .filter(|d| !d.allowed)
            .filter_map(|d| d.retry_after)
            .max()
    }
}

impl std::ops::Index<usize> for Decisions {
    type Output = Decision;

    fn index(&self, i: usize) -> &Decision {
        &self.as_slice()[i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(remaining: u32) -> Decision {
        Decision {
            remaining,
            allowed: true,
            ..UNUSED
        }
    }

    #[test]
    fn keeps_order_inline_and_beyond() {
        for n in [0u32, 1, 4, 5, 9] {
            let mut d = Decisions::with_capacity(0);
            for i in 0..n {
                d.push(decision(i));
            }
            assert_eq!(d.len(), n as usize);
            let remaining: Vec<u32> = d.as_slice().iter().map(|d| d.remaining).collect();
            assert_eq!(remaining, (0..n).collect::<Vec<_>>());
        }
    }
}
