//! The range a limit lives in: validated bounds, the largest limit a limiter tracks, and a
//! fractional limit kept inside its bounds.

use crate::vegas::error::ConfigError;

/// The range a limit lives in, and where it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitBounds {
    min: usize,
    max: usize,
    initial: usize,
}

impl LimitBounds {
    /// Limits in `[min, max]`, starting at `initial`.
    ///
    /// ```
    /// use flowguard::vegas::LimitBounds;
    ///
    /// let bounds = LimitBounds::new(1, 200, 20)?;
    /// assert_eq!(bounds.clamp(500.0), 200);
    /// assert!(LimitBounds::new(10, 5, 7).is_err()); // min above max
    /// # Ok::<(), flowguard::vegas::ConfigError>(())
    /// ```
    pub fn new(min: usize, max: usize, initial: usize) -> Result<Self, ConfigError> {
        for (field, value) in [("min", min), ("max", max), ("initial", initial)] {
            check_limit(field, value)?;
        }
        if min > max {
            return Err(ConfigError::MinAboveMax { min, max });
        }
        if initial < min || initial > max {
            return Err(ConfigError::InitialOutOfRange { initial, min, max });
        }
        Ok(Self { min, max, initial })
    }

    /// The smallest limit.
    pub fn min(&self) -> usize {
        self.min
    }

    /// The largest limit.
    pub fn max(&self) -> usize {
        self.max
    }

    /// The starting limit.
    pub fn initial(&self) -> usize {
        self.initial
    }

    /// Rounds a fractional limit down (tolerating float error) and keeps it inside `[min, max]` (NaN maps to `min`).
    pub fn clamp(&self, limit: f64) -> usize {
        if limit.is_nan() || limit <= self.min as f64 {
            self.min
        } else if limit >= self.max as f64 {
            self.max
        } else {
            // In range and finite, so the cast is exact after `floor`; the epsilon keeps sums of
            // fractional steps such as 10 x 0.1 from rounding down a whole unit.
            // (`as` truncates toward zero, which is `floor` for these positive values.)
            ((limit + 1e-9) as usize).clamp(self.min, self.max)
        }
    }

    /// Keeps a fractional limit inside `[min, max]` without rounding (NaN maps to `min`).
    pub fn clamp_f64(&self, limit: f64) -> f64 {
        if limit.is_nan() {
            self.min as f64
        } else {
            limit.clamp(self.min as f64, self.max as f64)
        }
    }
}

impl LimitBounds {
    /// `[1, 1000]`, starting at the minimum: the default of [`Vegas`](super::Vegas), whose slow
    /// start takes the limit up within a few rounds (an instance that joins a busy dependency
    /// must not add a burst of calls to a queue the others share).
    pub(crate) const STARTING_AT_MIN: Self = Self {
        min: 1,
        max: 1000,
        initial: 1,
    };
}

impl Default for LimitBounds {
    /// `[1, 1000]`, starting at 20 (the default of [`Aimd`](super::Aimd) and
    /// [`Gradient`](super::Gradient); [`Vegas`](super::Vegas) starts at 1).
    fn default() -> Self {
        Self {
            min: 1,
            max: 1000,
            initial: 20,
        }
    }
}

/// A limit kept as a fraction inside its bounds, so small per-sample steps add up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FractionalLimit {
    bounds: LimitBounds,
    value: f64,
}

impl FractionalLimit {
    /// Starts at the bounds' initial limit.
    pub(crate) fn new(bounds: LimitBounds) -> Self {
        Self {
            bounds,
            value: bounds.initial() as f64,
        }
    }

    /// The fractional value.
    pub(crate) fn value(&self) -> f64 {
        self.value
    }

    /// The whole limit.
    pub(crate) fn limit(&self) -> usize {
        self.bounds.clamp(self.value)
    }

    /// Moves to `value` (kept inside the bounds) and returns the whole limit.
    pub(crate) fn set(&mut self, value: f64) -> usize {
        self.value = self.bounds.clamp_f64(value);
        self.limit()
    }

    /// Whether a caller with `in_flight` calls uses at least half the limit (growth is only
    /// earned then).
    pub(crate) fn is_used_by(&self, in_flight: usize) -> bool {
        in_flight as f64 * 2.0 >= self.value
    }
}

/// The largest limit a [`Limiter`](crate::vegas::Limiter) tracks: 2^31 - 1 permits.
pub const MAX_LIMIT: usize = (1 << 31) - 1;

/// A limit setting must be in `1..=MAX_LIMIT`.
pub(crate) fn check_limit(field: &'static str, value: usize) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError::ZeroLimit { field });
    }
    if value > MAX_LIMIT {
        return Err(ConfigError::LimitTooLarge {
            field,
            value,
            max: MAX_LIMIT,
        });
    }
    Ok(())
}
