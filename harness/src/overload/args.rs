//! Reading `--flag value` pairs from the command line.

use std::str::FromStr;

/// The value after `flag`, parsed as `T`; the error names the flag and what was wrong.
pub fn value<T: FromStr>(args: &mut impl Iterator<Item = String>, flag: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    let raw = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
    raw.parse().map_err(|e| format!("{flag} {raw}: {e}"))
}

/// A value of `flag` that must be finite and positive (a rate, a duration in seconds).
pub fn positive(args: &mut impl Iterator<Item = String>, flag: &str) -> Result<f64, String> {
    let v: f64 = value(args, flag)?;
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(format!("{flag} must be a finite number above 0, got {v}"))
    }
}
