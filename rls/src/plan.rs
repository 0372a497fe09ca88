//! Deciding several descriptors as one request: what to peek, what to spend, what to answer.
//!
//! Pure: the backend feeds it what the store said and does what it returns.
//!
//! * One descriptor: spend it (a denied GCRA request changes nothing, so nothing is consumed for a
//!   denial).
//! * Several descriptors (or a cost above the burst): peek every one first (cost 0). When an
//!   enforced descriptor cannot take its cost, the request is denied and **nothing is spent**;
//!   otherwise every descriptor that fits is spent. Descriptors with the same key are summed, so
//!   a request naming one descriptor twice needs room for both.
//! * Shadow-mode descriptors never deny the request; they are spent when they fit and the request
//!   is allowed.
//!
//! Whether this is atomic depends on the backend: the in-memory backend runs peek and spend under
//! locks of every key involved, so no other request touches them in between. The Redis backend
//! does not peek when the store can decide the enforced descriptors' keys in one call (one
//! server, or one hash slot of a cluster): it decides them all or nothing in that call, then
//! spends the shadow-mode ones if the request was allowed (or answers them [`from_peek`] if it
//! was not). Otherwise (keys in several slots of a cluster) it peeks and spends as here, and
//! another instance may spend between the peek and the spend: then a later spend of the same
//! request may be denied after earlier ones were spent.

use std::time::Duration;

/// What the store answered for one descriptor, in the service's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the descriptor is within its limit (and, unless the request was denied, spent).
    pub allowed: bool,
    /// The burst `B`.
    pub limit: u32,
    /// Tokens that could be spent right now.
    pub remaining: u32,
    /// How long until the key is back to a full burst.
    pub reset_after: Duration,
    /// For a denied descriptor, how long until the same cost fits; `None` when allowed or never.
    pub retry_after: Option<Duration>,
    /// The emission interval `T` (one token comes back every `T`).
    pub interval: Duration,
    /// Whether a failure policy answered instead of the store (numbers are not authoritative).
    pub degraded: bool,
}

/// One descriptor to decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    /// Tokens asked for (per-descriptor `hits_addend`, else the request's, else 1).
    pub cost: u64,
    /// The quota's burst.
    pub burst: u32,
    /// `false` for shadow mode: never denies the request.
    pub enforce: bool,
    /// The first earlier item with the same key, if any.
    pub same_key_as: Option<usize>,
}

/// The first step for a set of items.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Spend every item at its cost; the answers are final.
    Spend,
    /// Peek every item (cost 0), then call [`after_peek`].
    Peek,
}

/// Where to start. `can_peek` is false for stores whose peek is not authoritative (two-tier
/// reservoirs): they spend each item independently, as the reference service counts them.
pub fn start(items: &[Item], can_peek: bool) -> Start {
    let single_that_fits =
        items.len() == 1 && items[0].cost <= u64::from(items[0].burst) && items[0].cost > 0;
    if !can_peek || single_that_fits {
        Start::Spend
    } else {
        Start::Peek
    }
}

/// What to do once every item was peeked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AfterPeek {
    /// The request is denied: these are the answers, nothing is spent.
    Deny(Vec<Verdict>),
    /// Spend the items at these indexes, at their cost; the others keep their peek answer, already
    /// in `answers` (a shadow item that does not fit, or a zero cost).
    Spend {
        /// Items to spend.
        spend: Vec<usize>,
        /// Answers so far; the spent ones are replaced by the spend's answer.
        answers: Vec<Verdict>,
    },
}

/// The cost of an item's whole key group (itself and every item with the same key).
fn group_cost(items: &[Item], i: usize) -> u64 {
    let root = items[i].same_key_as.unwrap_or(i);
    items
        .iter()
        .enumerate()
        .filter(|(j, item)| *j == root || item.same_key_as == Some(root))
        .fold(0u64, |sum, (_, item)| sum.saturating_add(item.cost))
}

/// The answer for item `i` from its peek: allowed when its key's group cost fits, otherwise a
/// denial with the time until it does.
pub fn from_peek(items: &[Item], i: usize, peek: &Verdict) -> Verdict {
    let (item, cost) = (&items[i], group_cost(items, i));
    let fits = peek.allowed && cost <= u64::from(item.burst) && cost <= u64::from(peek.remaining);
    if fits {
        Verdict {
            allowed: true,
            ..*peek
        }
    } else {
        denial(peek, cost, item.burst)
    }
}

/// Decides from the peeks (one per item, in order).
pub fn after_peek(items: &[Item], peeks: &[Verdict]) -> AfterPeek {
    let mut answers = Vec::with_capacity(items.len());
    let mut denied = false;
    for (i, (item, peek)) in items.iter().zip(peeks).enumerate() {
        let answer = from_peek(items, i, peek);
        denied |= item.enforce && !answer.allowed;
        answers.push(answer);
    }
    if denied {
        return AfterPeek::Deny(answers);
    }
    let spend = items
        .iter()
        .zip(&answers)
        .enumerate()
        .filter(|(_, (item, answer))| answer.allowed && item.cost > 0)
        .map(|(i, _)| i)
        .collect();
    AfterPeek::Spend { spend, answers }
}

/// The answer for an item that does not fit, from its peek: `retry_after` is when `cost` tokens
/// fit (`tat + cost*T - B*T - now`, with `tat - now` = the peek's `reset_after`), `None` when the
/// cost exceeds the burst and never fits.
fn denial(peek: &Verdict, cost: u64, burst: u32) -> Verdict {
    let retry_after = (cost <= u64::from(burst)).then(|| {
        let needed = peek
            .interval
            .saturating_mul(u32::try_from(cost).unwrap_or(u32::MAX));
        let window = peek.interval.saturating_mul(burst);
        (peek.reset_after + needed).saturating_sub(window)
    });
    Verdict {
        allowed: false,
        retry_after,
        ..*peek
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(100);

    fn item(cost: u64, burst: u32, enforce: bool) -> Item {
        Item {
            cost,
            burst,
            enforce,
            same_key_as: None,
        }
    }

    fn peek(remaining: u32, burst: u32) -> Verdict {
        Verdict {
            allowed: true,
            limit: burst,
            remaining,
            reset_after: T * (burst - remaining),
            retry_after: None,
            interval: T,
            degraded: false,
        }
    }

    #[test]
    fn one_descriptor_that_can_fit_is_spent_directly() {
        assert_eq!(start(&[item(1, 5, true)], true), Start::Spend);
        assert_eq!(start(&[item(6, 5, true)], true), Start::Peek);
        assert_eq!(start(&[item(0, 5, true)], true), Start::Peek);
        assert_eq!(
            start(&[item(1, 5, true), item(1, 5, true)], true),
            Start::Peek
        );
        assert_eq!(
            start(&[item(1, 5, true), item(1, 5, true)], false),
            Start::Spend
        );
    }

    #[test]
    fn an_enforced_descriptor_over_its_limit_denies_and_spends_nothing() {
        let items = [item(2, 5, true), item(2, 5, true)];
        let AfterPeek::Deny(answers) = after_peek(&items, &[peek(5, 5), peek(1, 5)]) else {
            panic!("denied");
        };
        assert!(answers[0].allowed);
        assert_eq!(answers[0].remaining, 5);
        assert!(!answers[1].allowed);
        // tat - now = 4T; 2 tokens fit once tat + 2T - 5T <= now: in T.
        assert_eq!(answers[1].retry_after, Some(T));
    }

    #[test]
    fn shadow_descriptors_never_deny_and_are_spent_only_when_they_fit() {
        let items = [item(1, 5, true), item(1, 5, false)];
        let AfterPeek::Spend { spend, answers } = after_peek(&items, &[peek(5, 5), peek(0, 5)])
        else {
            panic!("allowed");
        };
        assert_eq!(spend, vec![0]);
        assert!(!answers[1].allowed);
    }

    #[test]
    fn the_same_key_twice_needs_room_for_both() {
        let mut second = item(2, 5, true);
        second.same_key_as = Some(0);
        let items = [item(2, 5, true), second];
        assert!(matches!(
            after_peek(&items, &[peek(3, 5), peek(3, 5)]),
            AfterPeek::Deny(_)
        ));
        assert!(matches!(
            after_peek(&items, &[peek(4, 5), peek(4, 5)]),
            AfterPeek::Spend { ref spend, .. } if spend == &vec![0, 1]
        ));
    }

    #[test]
    fn a_cost_above_the_burst_is_denied_without_a_retry_time() {
        let AfterPeek::Deny(answers) = after_peek(&[item(6, 5, true)], &[peek(5, 5)]) else {
            panic!("denied");
        };
        assert_eq!(answers[0].retry_after, None);
        assert!(!answers[0].allowed);
    }

    #[test]
    fn a_peek_denied_by_a_failure_policy_does_not_fit() {
        let mut closed = peek(0, 5);
        closed.allowed = false;
        assert!(matches!(
            after_peek(&[item(1, 5, true), item(1, 5, true)], &[peek(5, 5), closed]),
            AfterPeek::Deny(_)
        ));
    }
}
