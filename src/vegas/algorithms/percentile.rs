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

/// The quantile the low percentile estimates (see [`low_percentile_index`]), for its standard
/// error.
const LOW_QUANTILE: f64 = 0.1;

/// The higher quantile whose distance from the low percentile estimates how densely the samples
/// lie there.
const SPACING_QUANTILE: f64 = 0.3;

/// The standard error of the low percentile `low` of `samples` (which the same call to
/// [`low_percentile`] returned), as a share of `low`. The standard error of a sample quantile
/// is `sqrt(p * (1 - p) / n) / f`, `f` the density of the samples there, which the spacing of
/// the order statistics estimates: `1 / f` is about `n * (x(m) - x(k)) / (m - k)`, `x(k)` the
/// low percentile (`p` about 0.1) and `x(m)` the sample at the 30th percentile. So the error is
/// `sqrt(p * (1 - p) * n) * (x(m) - x(k)) / (m - k) / x(k)`. The more the window's RTTs spread
/// and the fewer calls it holds, the more its low percentile scatters from one window to the
/// next with nothing queued. 0 for windows too small to tell (under 4 samples). The slice may
/// be reordered.
pub(crate) fn low_percentile_error(samples: &mut [u64], low: u64) -> f64 {
    let len = samples.len();
    let rank = low_percentile_index(len);
    let spacing_rank = ((len as f64 * SPACING_QUANTILE) as usize)
        .max(rank + 1)
        .min(len.saturating_sub(1));
    if len < 4 || spacing_rank <= rank || low == 0 {
        return 0.0;
    }
    let (_, higher, _) = samples.select_nth_unstable(spacing_rank);
    let spread = higher.saturating_sub(low) as f64 / (spacing_rank - rank) as f64;
    (LOW_QUANTILE * (1.0 - LOW_QUANTILE) * len as f64).sqrt() * spread / low as f64
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
    fn the_low_percentiles_error_grows_with_the_spread_and_falls_with_the_samples() {
        // 16 samples evenly spread from 90 to 105: the low percentile is the second lowest (91),
        // the 30th percentile the fifth lowest (94); 0.3 * 4 * (94 - 91) / 3 / 91.
        let mut even: Vec<u64> = (90..106).collect();
        let low = low_percentile(&mut even).unwrap();
        assert_eq!(low, 91);
        let error = low_percentile_error(&mut even, low);
        assert!((error - 0.3 * 4.0 * 1.0 / 91.0).abs() < 1e-12, "{error}");
        // Twice the spread, twice the error; identical samples, none.
        let mut wide: Vec<u64> = (0..16).map(|i| 90 + 2 * i).collect();
        let low = low_percentile(&mut wide).unwrap();
        assert!((low_percentile_error(&mut wide, low) - 2.0 * error).abs() < 1e-3);
        let mut same = vec![100_u64; 16];
        assert_eq!(low_percentile_error(&mut same, 100), 0.0);
        // Four times the samples over the same spread: half the error.
        let mut many: Vec<u64> = (0..64).map(|i| 3600 + i).collect();
        let low = low_percentile(&mut many).unwrap();
        let many_error = low_percentile_error(&mut many, low);
        let mut few: Vec<u64> = (0..16).map(|i| 3600 + 4 * i).collect();
        let low = low_percentile(&mut few).unwrap();
        let few_error = low_percentile_error(&mut few, low);
        assert!(
            (many_error / few_error - 0.5).abs() < 0.1,
            "{many_error} {few_error}"
        );
        // Too few samples to tell.
        assert_eq!(low_percentile_error(&mut [5, 6, 7], 6), 0.0);
    }

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
