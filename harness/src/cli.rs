//! Command-line value parsers the measurement programs share, for `clap`'s `value_parser`.
//!
//! clap prints the message of a refused value after the flag, e.g.
//! `invalid value '0' for '--tasks <N>': must be at least 1`.

use std::fmt::Display;
use std::str::FromStr;

/// A count of at least 1 (clients, tasks, rounds, keys): `value_parser = positive::<usize>`.
pub fn positive<T>(text: &str) -> Result<T, String>
where
    T: FromStr + PartialOrd + From<u8>,
    T::Err: Display,
{
    let n: T = text.parse().map_err(|e| format!("{e}"))?;
    if n < T::from(1) {
        return Err("must be at least 1".into());
    }
    Ok(n)
}

/// A run length in seconds: a finite number above 0 (fractions allowed, `0.5`).
pub fn seconds(text: &str) -> Result<f64, String> {
    let s: f64 = text.parse().map_err(|e| format!("{e}"))?;
    if !(s.is_finite() && s > 0.0) {
        return Err("must be a number of seconds above 0".into());
    }
    Ok(s)
}

/// A finite number above 0 (a rate, a multiple, milliseconds): `value_parser = above_zero`.
pub fn above_zero(text: &str) -> Result<f64, String> {
    let v: f64 = text.parse().map_err(|e| format!("{e}"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err("must be a finite number above 0".into());
    }
    Ok(v)
}

/// A service time's spread either side of its mean, as a fraction in `[0, 1)` (`0.3`: each
/// call takes 70 % to 130 % of the mean): `value_parser = spread`.
pub fn spread(text: &str) -> Result<f64, String> {
    let v: f64 = text.parse().map_err(|e| format!("{e}"))?;
    if !(0.0..1.0).contains(&v) {
        return Err("must be a fraction of the mean service time, at least 0 and below 1".into());
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_start_at_one() {
        assert_eq!(positive::<usize>("1"), Ok(1));
        assert_eq!(positive::<u64>("100000"), Ok(100_000));
        assert_eq!(positive::<usize>("0"), Err("must be at least 1".into()));
        assert!(positive::<u32>("-1").is_err());
        assert!(positive::<usize>("ten").is_err());
    }

    #[test]
    fn numbers_are_finite_and_above_zero() {
        assert_eq!(above_zero("2.5"), Ok(2.5));
        for refused in ["0", "-1", "NaN", "inf", "lots"] {
            assert!(above_zero(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn a_spread_is_a_fraction_below_one() {
        assert_eq!(spread("0"), Ok(0.0));
        assert_eq!(spread("0.3"), Ok(0.3));
        for refused in ["1", "1.5", "-0.1", "NaN", "wide"] {
            assert!(spread(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn seconds_are_finite_and_above_zero() {
        assert_eq!(seconds("0.5"), Ok(0.5));
        assert_eq!(seconds("3"), Ok(3.0));
        for refused in ["0", "-1", "NaN", "inf", "soon"] {
            assert!(seconds(refused).is_err(), "{refused}");
        }
    }
}
