//! Exponential draws: Poisson arrival gaps and the simulated host's delays.

use rand::Rng;

/// A draw from the exponential distribution of mean 1, by inversion: `-ln(1 - u)` for `u`
/// uniform in `[0, 1)`, so never `ln(0)`. Divide by a rate (gaps of a Poisson process) or
/// multiply by a mean.
pub fn unit_exponential(rng: &mut impl Rng) -> f64 {
    -(1.0 - rng.random::<f64>()).ln()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn draws_are_positive_with_mean_one() {
        let mut rng = SmallRng::seed_from_u64(7);
        let draws: Vec<f64> = (0..100_000).map(|_| unit_exponential(&mut rng)).collect();
        assert!(draws.iter().all(|d| d.is_finite() && *d >= 0.0));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 1.0).abs() < 0.02, "{mean}");
    }
}
