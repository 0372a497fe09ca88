//! A busy or shared host: every call takes the same extra delay for a while.
//!
//! Time is cut into epochs of [`NOISE_EPOCH`]; every call whose service starts in an epoch takes
//! that epoch's delay longer, drawn from an exponential distribution with a given mean. The
//! windows of RTT samples a limiter judges then differ from one another by more than the
//! service-time jitter alone makes them, as on real sockets on a host whose other work comes
//! and goes (the host's own work delays the client and the backend alike, and costs capacity:
//! 0.4 ms on average against 10 ms of service takes about 4 % of it).

use std::time::Duration;

use flowguard_harness::exponential::unit_exponential;
use rand::SeedableRng;
use rand::rngs::SmallRng;

/// How long the host's delay stays the same in the host-noise model: about one window of
/// samples at 8 workers (16 calls at 10 ms).
pub const NOISE_EPOCH: Duration = Duration::from_nanos(EPOCH_NANOS);
const EPOCH_NANOS: u64 = 20_000_000;

/// The host's delay of each [`NOISE_EPOCH`], drawn as the epochs are reached, from an RNG of its
/// own so that a quiet host (`mean` zero) leaves the other draws of a seed as they were.
pub struct HostNoise {
    mean: f64,
    rng: SmallRng,
    delays: Vec<u64>,
}

impl HostNoise {
    /// A host whose delays have mean `mean` (zero: a quiet host), drawn from `seed`.
    pub fn new(mean: Duration, seed: u64) -> Self {
        Self {
            mean: mean.as_nanos() as f64,
            rng: SmallRng::seed_from_u64(seed ^ 0x6e6f_6973_6520_6f6e),
            delays: Vec::new(),
        }
    }

    /// The delay of the epoch holding `at`, in nanoseconds.
    pub fn delay(&mut self, at: u64) -> u64 {
        if self.mean == 0.0 {
            return 0;
        }
        let epoch = (at / EPOCH_NANOS) as usize;
        while self.delays.len() <= epoch {
            let draw = unit_exponential(&mut self.rng) * self.mean;
            self.delays.push(draw as u64);
        }
        self.delays[epoch]
    }
}

/// How a scenario's header names the host noise: nothing for a quiet host.
pub fn describe(mean: Duration) -> String {
    if mean.is_zero() {
        String::new()
    } else {
        format!("; host noise: {mean:?} on average, per {NOISE_EPOCH:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_host_adds_no_delay_and_draws_nothing() {
        let mut quiet = HostNoise::new(Duration::ZERO, 7);
        for at in [0, 1, EPOCH_NANOS * 1000] {
            assert_eq!(quiet.delay(at), 0);
        }
        assert!(quiet.delays.is_empty());
    }

    #[test]
    fn a_noisy_host_delays_every_call_of_an_epoch_alike() {
        let mean = Duration::from_micros(400);
        let mut noise = HostNoise::new(mean, 7);
        let epoch = EPOCH_NANOS;
        let epochs = 20_000_u64;
        // Asked out of order: an epoch's delay does not depend on when it is first asked for.
        let last = noise.delay((epochs - 1) * epoch);
        assert_eq!(noise.delay(epochs * epoch - 1), last);
        let mut total = 0_u64;
        let mut differs = 0;
        for index in 0..epochs {
            let start = noise.delay(index * epoch);
            assert_eq!(noise.delay(index * epoch + epoch / 2), start);
            assert_eq!(noise.delay(index * epoch + epoch - 1), start);
            differs += usize::from(start != noise.delay((index + 1) * epoch));
            total += start;
        }
        // Exponential with the given mean (20,000 draws of a fixed seed: the mean is within a
        // few percent), and the delay changes from one epoch to the next.
        let measured = total as f64 / epochs as f64;
        let expected = mean.as_nanos() as f64;
        assert!(
            (measured / expected - 1.0).abs() < 0.05,
            "{measured} vs {expected}"
        );
        assert!(differs as u64 > epochs * 99 / 100);
    }
}
