//! [`Decisions`]: the answers of a joint check, one per demand, kept inline for a few demands.

use std::time::Duration;

use crate::gcra::Decision;

/// Fills the first slot before a decision is pushed.
const UNUSED: Decision = Decision {
    allowed: false,
    limit: 0,
    remaining: 0,
    retry_after: None,
    reset_after: Duration::ZERO,
    degraded: None,
    reason: None,
};

/// The answers of [`LimitSet::check_all`](super::LimitSet::check_all), one [`Decision`] per
/// demand, in the order of the demands. The first is kept inline, so a check of one demand
/// allocates nothing (and the value stays small to move); more go to the heap.
///
/// When [`allowed`](Self::allowed), every demand was granted and spent. Otherwise nothing was
/// spent (for sets that decide atomically), and each decision says whether its demand alone
/// would fit right now (`allowed`) or when it will ([`retry_after`](Decision::retry_after)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decisions {
    first: Decision,
    /// Every decision, when there are more than one (the first included, so that
    /// [`as_slice`](Self::as_slice) is one slice).
    all: Vec<Decision>,
    len: usize,
}

impl Decisions {
    /// No decisions yet, with room for `demands`.
    pub(crate) fn with_capacity(demands: usize) -> Decisions {
        Decisions {
            first: UNUSED,
            all: if demands > 1 {
                Vec::with_capacity(demands)
            } else {
                Vec::new()
            },
            len: 0,
        }
    }

    /// One decision.
    pub fn one(decision: Decision) -> Decisions {
        Decisions {
            first: decision,
            all: Vec::new(),
            len: 1,
        }
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
        match self.len {
            0 => self.first = decision,
            1 => {
                self.all.reserve(2);
                self.all.push(self.first);
                self.all.push(decision);
            }
            _ => self.all.push(decision),
        }
        self.len += 1;
    }

    /// The decisions, one per demand, in order.
    pub fn as_slice(&self) -> &[Decision] {
        match self.len {
            0 => &[],
            1 => std::slice::from_ref(&self.first),
            _ => &self.all,
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
