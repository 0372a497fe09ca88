//! The GCRA window bound, checked with integers: in any window of length `t`, at most
//! `B + t / T` tokens with the nominal `T = period / rate`.

use flowguard::gcra::Quota;

/// Checks every window that starts and ends at an admission (the tightest ones): `admitted` holds
/// (nanoseconds, tokens) in time order. Says which window broke the bound.
pub fn check_windows(quota: &Quota, admitted: &[(u128, u128)]) -> Result<(), String> {
    let (rate, period, b) = (
        u128::from(quota.rate()),
        quota.period().as_nanos(),
        u128::from(quota.burst()),
    );
    for i in 0..admitted.len() {
        let mut tokens = 0;
        for j in i..admitted.len() {
            tokens += admitted[j].1;
            let span = admitted[j].0 - admitted[i].0;
            // tokens <= B + span / (period / rate)  <=>  tokens * period <= B * period + span * rate
            if tokens * period > b * period + span * rate {
                return Err(format!("{tokens} tokens in {span} ns with {quota:?}"));
            }
        }
    }
    Ok(())
}
