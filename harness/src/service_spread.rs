//! How far each call's service time strays from the mean, in the simulations: uniformly within a
//! share of the mean either way (the default), or lognormally, as measured service times tend to
//! be, with a long tail to the right and a thin one to the left.

use rand::Rng;

/// The shape of the spread of the service time around its mean.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpreadShape {
    /// Uniform from `1 - F` to `1 + F` times the mean.
    #[default]
    Uniform,
    /// `exp(F * z - F^2 / 2)` times the mean, `z` standard normal: a mean of 1 and a standard
    /// deviation of about `F` times the mean for small `F`.
    Lognormal,
}

impl SpreadShape {
    /// The flag's value.
    pub fn name(self) -> &'static str {
        match self {
            SpreadShape::Uniform => "uniform",
            SpreadShape::Lognormal => "lognormal",
        }
    }

    /// A factor on the mean service time for spread `f`: one draw from `rng` for the uniform
    /// shape (so that runs with it repeat draw for draw), two for the lognormal one.
    pub fn factor(self, f: f64, rng: &mut impl Rng) -> f64 {
        match self {
            SpreadShape::Uniform => 1.0 + f * (2.0 * rng.random::<f64>() - 1.0),
            SpreadShape::Lognormal => {
                // Box-Muller; 1 - u keeps the logarithm finite.
                let (u1, u2): (f64, f64) = (rng.random(), rng.random());
                let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (f * z - f * f / 2.0).exp()
            }
        }
    }

    /// The spread in words, for the printed scenario: `+/-10%` or `lognormal sigma 0.1`.
    pub fn describe(self, f: f64) -> String {
        match self {
            SpreadShape::Uniform => format!("+/-{}%", f * 100.0),
            SpreadShape::Lognormal => format!("lognormal sigma {f}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    fn mean_and_sd(shape: SpreadShape, f: f64) -> (f64, f64, f64, f64) {
        let mut rng = SmallRng::seed_from_u64(3);
        let draws: Vec<f64> = (0..100_000).map(|_| shape.factor(f, &mut rng)).collect();
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let var = draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / draws.len() as f64;
        let (lo, hi) = draws
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &d| (lo.min(d), hi.max(d)));
        (mean, var.sqrt(), lo, hi)
    }

    #[test]
    fn a_uniform_spread_stays_within_its_share_of_the_mean() {
        let (mean, sd, lo, hi) = mean_and_sd(SpreadShape::Uniform, 0.3);
        assert!((mean - 1.0).abs() < 0.01, "{mean}");
        assert!((sd - 0.3 / 3f64.sqrt()).abs() < 0.01, "{sd}");
        assert!(lo >= 0.7 && hi < 1.3, "{lo} {hi}");
    }

    #[test]
    fn a_lognormal_spread_keeps_the_mean_and_has_a_long_right_tail() {
        let (mean, sd, lo, hi) = mean_and_sd(SpreadShape::Lognormal, 0.1);
        assert!((mean - 1.0).abs() < 0.01, "{mean}");
        assert!((sd - 0.1).abs() < 0.01, "{sd}");
        assert!(lo > 0.0 && 1.0 - lo < hi - 1.0, "{lo} {hi}");
    }

    #[test]
    fn no_spread_is_the_mean_itself() {
        let mut rng = SmallRng::seed_from_u64(1);
        for shape in [SpreadShape::Uniform, SpreadShape::Lognormal] {
            assert_eq!(shape.factor(0.0, &mut rng), 1.0);
        }
    }
}
