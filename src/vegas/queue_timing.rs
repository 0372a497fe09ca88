//! [`QueueTiming`]: where a dependency's response says how long the call waited in its queue, a
//! metric of the `Server-Timing` header.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};

use super::error::ConfigError;
use crate::headers::Decimal;

/// `Server-Timing` (the `http` crate has no constant for it).
const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");

/// The `Server-Timing` metric in which a dependency reports how long each call waited in its
/// queue before a worker took it, e.g. `Server-Timing: flowguard-queue;dur=3.2` (milliseconds,
/// as the header's `dur` always is).
///
/// Both sides use [`QueueTiming::default()`], the metric [`DEFAULT_METRIC`](Self::DEFAULT_METRIC)
/// (`flowguard-queue`), unless told otherwise: the [`HttpClassifier`](crate::vegas::HttpClassifier)
/// that a `Guard`'s outbound layer and reqwest middleware use reads it, and
/// [`WorkerQueueLayer`](crate::vegas::worker_queue::WorkerQueueLayer) (feature `tower`) writes it.
/// So a fleet of instances in front of a dependency served behind that layer gets the reports
/// with no setting on either side. The name is the crate's own, so that no other server's
/// `Server-Timing` metric (a `queue` timed against a load balancer's clock, say) is taken for
/// one. [`server_timing`](Self::server_timing) names another metric, for a dependency that
/// already reports its queue under a name of its own.
///
/// Read by the classifier, the report lets the outbound layer and the reqwest middleware finish
/// each successful call with [`Permit::success_queued`](crate::vegas::Permit::success_queued):
/// Vegas then learns the dependency's unloaded round-trip time from `rtt - queued`, which every
/// instance of a fleet measures alike, instead of from the lowest round-trip time it saw, which
/// depends on the queue the other instances keep. That is what makes a fleet's shares even (see
/// the guide's "When the dependency reports its queue").
///
/// The dependency's side is [`append`](Self::append) (or [`header_value`](Self::header_value)):
/// the header to answer with; a tower service that serves its requests a few at a time can let
/// `WorkerQueueLayer` queue them and answer the header.
/// The report must cover the whole wait, from the moment the request joined the queue to the
/// moment a worker took it: a dependency that reports less hides that much of its queue from
/// Vegas. A report as long as the round trip or longer cannot be true and counts as none.
///
/// ```
/// use std::time::Duration;
/// use flowguard::vegas::QueueTiming;
/// use http::HeaderMap;
///
/// let timing = QueueTiming::default();
///
/// // The dependency: the call waited 3.2 ms for a worker.
/// let mut headers = HeaderMap::new();
/// headers.insert("server-timing", timing.header_value(Duration::from_micros(3200)));
/// assert_eq!(headers["server-timing"], "flowguard-queue;dur=3.200");
///
/// // The client: reads it back, among other metrics.
/// headers.append("server-timing", "db;dur=53, app;dur=47.2".parse()?);
/// assert_eq!(timing.read(&headers), Some(Duration::from_micros(3200)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct QueueTiming {
    metric: Metric,
}

/// A metric's name: the default one without an allocation (so that
/// [`HttpClassifier::new`](crate::vegas::HttpClassifier::new) stays a `const fn`), any other
/// shared by the clones.
#[derive(Clone)]
enum Metric {
    Static(&'static str),
    Shared(Arc<str>),
}

impl Metric {
    fn as_str(&self) -> &str {
        match self {
            Self::Static(name) => name,
            Self::Shared(name) => name,
        }
    }
}

impl PartialEq for Metric {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Metric {}

impl Default for QueueTiming {
    /// The metric [`DEFAULT_METRIC`](Self::DEFAULT_METRIC), `flowguard-queue`.
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl QueueTiming {
    /// The metric both sides use unless told otherwise: `flowguard-queue`.
    pub const DEFAULT_METRIC: &'static str = "flowguard-queue";

    /// [`QueueTiming::default()`], usable in a `const`.
    pub(crate) const DEFAULT: Self = Self {
        metric: Metric::Static(Self::DEFAULT_METRIC),
    };

    /// The `Server-Timing` metric called `metric`, or [`ConfigError::InvalidMetricName`] when
    /// `metric` is not an HTTP token (letters, digits and ``!#$%&'*+-.^_`|~``, at least one).
    pub fn server_timing(metric: &str) -> Result<Self, ConfigError> {
        if metric.is_empty() || !metric.bytes().all(is_token_byte) {
            return Err(ConfigError::InvalidMetricName {
                name: metric.to_owned(),
            });
        }
        Ok(Self {
            metric: Metric::Shared(metric.into()),
        })
    }

    /// The metric's name.
    pub fn metric(&self) -> &str {
        self.metric.as_str()
    }

    /// How long the call waited, as reported in `headers`: the `dur` of the first metric of
    /// this name in the `Server-Timing` headers (metric and parameter names compared without
    /// regard to ASCII case). `None` when no such metric has a `dur` that is a finite number of
    /// milliseconds `>= 0`: an answer without a report (or with a malformed one) is taken as a
    /// plain success, never as a made-up wait.
    pub fn read(&self, headers: &HeaderMap) -> Option<Duration> {
        headers
            .get_all(SERVER_TIMING)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .find_map(|entry| self.duration_in(entry))
    }

    /// The header value that reports a wait of `queued` under this metric:
    /// `<metric>;dur=<milliseconds, 3 decimals>`. Insert it as `Server-Timing` (or append it
    /// beside other metrics).
    pub fn header_value(&self, queued: Duration) -> HeaderValue {
        // Whole microseconds, rounded half up, written digit by digit: a server writes this on
        // every answer, and `format!("{:.3}")` of an `f64` costs several times as much. A wait
        // of more than u64::MAX ms (585 million years) is written as that.
        let micros = (queued.as_nanos() + 500) / 1_000;
        let millis = Decimal::new(u64::try_from(micros / 1_000).unwrap_or(u64::MAX));
        let fraction = (micros % 1_000) as u16;
        let metric = self.metric();
        let mut value = Vec::with_capacity(metric.len() + ";dur=".len() + millis.len() + 4);
        value.extend_from_slice(metric.as_bytes());
        value.extend_from_slice(b";dur=");
        value.extend_from_slice(millis.as_bytes());
        value.push(b'.');
        for digit in [fraction / 100, fraction / 10 % 10, fraction % 10] {
            value.push(b'0' + digit as u8);
        }
        HeaderValue::try_from(value)
            .expect("a token, ';dur=' and a decimal number are valid header characters")
    }

    /// Appends the report of a wait of `queued` to `headers`, as a `Server-Timing` field of its
    /// own, beside any metrics already there: how a dependency that queues its requests
    /// answers.
    ///
    /// ```
    /// use std::time::Duration;
    /// use flowguard::vegas::QueueTiming;
    ///
    /// let timing = QueueTiming::default();
    /// let mut response = http::Response::new(());
    /// response.headers_mut().insert("server-timing", "db;dur=4".parse()?);
    /// timing.append(response.headers_mut(), Duration::from_millis(12));
    ///
    /// let fields: Vec<_> = response.headers().get_all("server-timing").iter().collect();
    /// assert_eq!(fields, ["db;dur=4", "flowguard-queue;dur=12.000"]);
    /// assert_eq!(timing.read(response.headers()), Some(Duration::from_millis(12)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn append(&self, headers: &mut HeaderMap, queued: Duration) {
        headers.append(SERVER_TIMING, self.header_value(queued));
    }

    /// The duration of `entry` (`name;param=value;...`) if it is this metric with a valid `dur`;
    /// `None` otherwise, or when it has none (the metric named without a duration).
    fn duration_in(&self, entry: &str) -> Option<Duration> {
        let mut parts = entry.split(';');
        let name = parts.next()?.trim();
        if !name.eq_ignore_ascii_case(self.metric()) {
            return None;
        }
        // The first `dur` counts; later ones are ignored, as browsers do.
        let dur = parts.find_map(|param| {
            let (key, value) = param.split_once('=')?;
            key.trim()
                .eq_ignore_ascii_case("dur")
                .then(|| value.trim().trim_matches('"'))
        })?;
        let millis: f64 = dur.parse().ok()?;
        // Rounded to the nanosecond: `3.2` is 3,200,000 ns, not the 3,199,999 of the nearest
        // binary fraction. Above u64::MAX ns (584 years) or not a number >= 0: no report.
        let nanos = (millis * 1e6).round();
        (nanos >= 0.0 && nanos < u64::MAX as f64).then(|| Duration::from_nanos(nanos as u64))
    }
}

impl fmt::Debug for QueueTiming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("QueueTiming::server_timing")
            .field(&self.metric())
            .finish()
    }
}

/// `tchar` of RFC 9110: the characters of an HTTP token.
fn is_token_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(SERVER_TIMING, value.parse().unwrap());
        }
        headers
    }

    fn queue() -> QueueTiming {
        QueueTiming::server_timing("queue").unwrap()
    }

    #[test]
    fn reads_the_first_metric_of_its_name_among_others() {
        let read = |values: &[&str]| queue().read(&headers(values));
        assert_eq!(read(&["queue;dur=2.5"]), Some(Duration::from_micros(2500)));
        assert_eq!(
            read(&["db;dur=53, Queue ; DUR = \"7\" ;desc=\"wait\""]),
            Some(Duration::from_millis(7))
        );
        assert_eq!(
            read(&["app;dur=1", "queue;desc=x;dur=0, queue;dur=9"]),
            Some(Duration::ZERO)
        );
        assert_eq!(read(&["queue;dur=4;dur=8"]), Some(Duration::from_millis(4)));
    }

    #[test]
    fn a_missing_or_malformed_report_is_none() {
        let read = |values: &[&str]| queue().read(&headers(values));
        assert_eq!(read(&[]), None);
        assert_eq!(read(&["queued;dur=3", "app;dur=1"]), None);
        assert_eq!(read(&["queue"]), None);
        for bad in ["-1", "NaN", "inf", "1e400", "3ms", ""] {
            assert_eq!(read(&[&format!("queue;dur={bad}")]), None, "dur={bad}");
        }
    }

    #[test]
    fn the_header_value_reads_back() {
        let timing = queue();
        for queued in [
            Duration::ZERO,
            Duration::from_micros(1),
            Duration::from_millis(3),
            Duration::from_secs(90),
        ] {
            let mut map = HeaderMap::new();
            map.insert(SERVER_TIMING, timing.header_value(queued));
            assert_eq!(timing.read(&map), Some(queued));
        }
    }

    #[test]
    fn the_header_value_is_milliseconds_with_three_decimals_rounded_half_up() {
        let value = |nanos: u64| {
            let value = queue().header_value(Duration::from_nanos(nanos));
            value.to_str().unwrap().to_owned()
        };
        assert_eq!(value(0), "queue;dur=0.000");
        assert_eq!(value(499), "queue;dur=0.000");
        assert_eq!(value(500), "queue;dur=0.001");
        assert_eq!(value(3_200_000), "queue;dur=3.200");
        assert_eq!(value(12_345_678), "queue;dur=12.346");
        assert_eq!(value(999_999_500), "queue;dur=1000.000");
        // Past u64::MAX ms, the milliseconds saturate (the reader takes none of these anyway).
        assert_eq!(
            queue().header_value(Duration::MAX).to_str().unwrap(),
            "queue;dur=18446744073709551615.000"
        );
        // Every value agrees with the decimal written by `format!`.
        for nanos in (0..2_000_000u64).step_by(777).chain([u64::MAX]) {
            let micros = (u128::from(nanos) + 500) / 1_000;
            let expected = format!("queue;dur={}.{:03}", micros / 1_000, micros % 1_000);
            assert_eq!(value(nanos), expected, "{nanos} ns");
        }
    }

    #[test]
    fn the_default_metric_is_the_crates_own_and_equals_the_same_name_given() {
        let timing = QueueTiming::default();
        assert_eq!(timing.metric(), "flowguard-queue");
        assert_eq!(
            timing,
            QueueTiming::server_timing(QueueTiming::DEFAULT_METRIC).unwrap()
        );
        assert_ne!(timing, queue());
        assert_eq!(
            timing.read(&headers(&["queue;dur=5, flowguard-queue;dur=2"])),
            Some(Duration::from_millis(2))
        );
        assert_eq!(timing.read(&headers(&["queue;dur=5"])), None);
        assert_eq!(
            format!("{timing:?}"),
            "QueueTiming::server_timing(\"flowguard-queue\")"
        );
    }

    #[test]
    fn a_metric_name_must_be_a_token() {
        for bad in ["", "queue time", "a;b", "q,r", "é"] {
            assert_eq!(
                QueueTiming::server_timing(bad),
                Err(ConfigError::InvalidMetricName { name: bad.into() }),
                "{bad:?}"
            );
        }
        assert_eq!(
            QueueTiming::server_timing("q-1_x").unwrap().metric(),
            "q-1_x"
        );
    }
}
