//! The low percentile of a window of RTT samples: the statistic both sides of the Vegas
//! comparison use, so that one outlier never counts.

/// Index of the low percentile (p10) in a sorted slice of `len` samples. It always skips the
/// smallest sample when there are two or more, so a single outlier never becomes the baseline.
pub(crate) fn low_percentile_index(len: usize) -> usize {
    if len < 2 { 0 } else { (len / 10).max(1) }
}

/// Ranks up to this one are found by a single pass that keeps the lowest values seen.
const SMALL_RANK: usize = 4;

/// Returns the low percentile of `samples` (the value a sort would put at
/// [`low_percentile_index`]; the slice may be reordered), or `None` if empty.
pub(crate) fn low_percentile(samples: &mut [u64]) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    let rank = low_percentile_index(samples.len());
    if rank < SMALL_RANK {
        return Some(nth_lowest_small(samples, rank));
    }
    // Selection in linear time; the rank is below the length of a non-empty slice.
    let (_, low, _) = samples.select_nth_unstable(rank);
    Some(*low)
}

/// The value at `rank` (< `SMALL_RANK`) in sorted order: one pass keeping the `rank + 1`
/// lowest values seen, in order. Windows of under 40 samples need at most the fourth lowest, so
/// this is cheaper than a general selection for them.
fn nth_lowest_small(samples: &[u64], rank: usize) -> u64 {
    let mut lowest = [u64::MAX; SMALL_RANK];
    let last = rank.min(SMALL_RANK - 1);
    for &value in samples {
        if value >= lowest[last] {
            continue;
        }
        let mut slot = last;
        while slot > 0 && lowest[slot - 1] > value {
            lowest[slot] = lowest[slot - 1];
            slot -= 1;
        }
        lowest[slot] = value;
    }
    lowest[last]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_percentile_is_the_sorted_value_at_its_index() {
        let mut state = 7u64;
        for len in 1..120 {
            let mut samples: Vec<u64> = (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    // Few distinct values, so ties are common.
                    (state >> 40) % 50
                })
                .collect();
            let mut sorted = samples.clone();
            sorted.sort_unstable();
            assert_eq!(
                low_percentile(&mut samples),
                Some(sorted[low_percentile_index(len)]),
                "{len}"
            );
        }
        assert_eq!(low_percentile(&mut []), None);
    }
}
