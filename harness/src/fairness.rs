//! How evenly a fleet shares a dependency: Jain's fairness index, and when a newcomer reached its
//! share. Used by the fleet scenarios of `vegas_sim` and of the `overload` run.

/// Jain's fairness index of `values`: `(sum x)^2 / (n * sum x^2)`, 1 when all are equal, `1/n`
/// when one takes everything. `None` for no values or all zero.
pub fn jain_index(values: &[f64]) -> Option<f64> {
    let sum: f64 = values.iter().sum();
    let squares: f64 = values.iter().map(|x| x * x).sum();
    if values.is_empty() || squares <= 0.0 {
        return None;
    }
    Some(sum * sum / (values.len() as f64 * squares))
}

/// Seconds from `joined_at` until a newcomer first holds `share` (e.g. 0.8) of its fair share for
/// two windows in a row, or `None` if it never does.
///
/// `windows[i]` is `(newcomer's goodput, every active instance's goodput, active instances)` over
/// window `i` of `window_s` seconds (window 0 starting at 0); its fair share of window `i` is the
/// total divided by the active instances. The answer is the end of the first of the two windows.
pub fn time_to_share(
    windows: &[(f64, f64, usize)],
    window_s: f64,
    joined_at: f64,
    share: f64,
) -> Option<f64> {
    let first = (joined_at / window_s).ceil() as usize;
    let reached = |&(own, total, active): &(f64, f64, usize)| {
        active > 0 && total > 0.0 && own >= share * total / active as f64
    };
    (first..windows.len().saturating_sub(1))
        .find(|&i| reached(&windows[i]) && reached(&windows[i + 1]))
        .map(|i| (i + 1) as f64 * window_s - joined_at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_shares_are_fair_and_one_taker_is_one_in_n() {
        assert_eq!(jain_index(&[3.0, 3.0, 3.0, 3.0]), Some(1.0));
        assert_eq!(jain_index(&[8.0, 0.0, 0.0, 0.0]), Some(0.25));
        let index = jain_index(&[202.0, 41.0, 53.0, 50.0]).unwrap();
        assert!((0.62..0.63).contains(&index), "{index}");
        assert_eq!(jain_index(&[]), None);
        assert_eq!(jain_index(&[0.0, 0.0]), None);
    }

    #[test]
    fn a_newcomer_reaches_its_share_when_two_windows_in_a_row_say_so() {
        // Windows of 0.5 s; joined at 1.0 s; 4 active, 400 in total: fair share 100.
        let windows = [
            (0.0, 300.0, 3),
            (0.0, 300.0, 3),
            (10.0, 400.0, 4),
            (85.0, 400.0, 4),
            (70.0, 400.0, 4),
            (90.0, 400.0, 4),
            (100.0, 400.0, 4),
        ];
        // Windows 5 and 6 hold >= 80: the first ends at 3.0 s, 2.0 s after joining.
        assert_eq!(time_to_share(&windows, 0.5, 1.0, 0.8), Some(2.0));
        assert_eq!(time_to_share(&windows[..6], 0.5, 1.0, 0.8), None);
    }
}
