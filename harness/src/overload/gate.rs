//! The limiters compared, each in front of the same HTTP call: none, tower's fixed
//! `ConcurrencyLimit`, flowguard's outbound layer (a [`Guard`]'s, Vegas by default), and
//! tower-acc's Vegas.
//!
//! Every limiter gets the same contract: a request waits up to `wait` for a permit and is shed
//! after that; an admitted request has until its deadline to get its answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use flowguard::Guard;
use flowguard::vegas::layer::AdaptiveConcurrencyService;
use flowguard::vegas::{HttpClassifier, Limiter, Shed};

use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

use crate::vegas_settings::VegasSettings;

/// Which limiter stands in front of the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimiterKind {
    /// Every request is sent.
    None,
    /// tower's `ConcurrencyLimit` with this many permits (hand-sized).
    Fixed(usize),
    /// flowguard's outbound layer, as a `Guard` hands it out: its default Vegas limiter, the
    /// same wait for a permit as the others, but told not to read the backend's queue reports
    /// (`HttpClassifier::without_queue_timing`): Vegas on round-trip times alone.
    Flowguard,
    /// The guard's outbound layer with its default classifier, which reads the queueing the
    /// backend reports in each answer (`Server-Timing: flowguard-queue;dur=<ms>`).
    FlowguardQueue,
    /// tower-acc 0.1's `ConcurrencyLimit` with its default Vegas.
    TowerAcc,
}

impl LimiterKind {
    /// The limiters `--limiter all` runs, in that order.
    pub const ALL: [LimiterKind; 5] = [
        LimiterKind::None,
        LimiterKind::Fixed(4),
        LimiterKind::Fixed(16),
        LimiterKind::Flowguard,
        LimiterKind::TowerAcc,
    ];

    /// The limiters a fleet run compares when `--limiter all`: fixed limits of 1 (they add up to
    /// the worker count for 4 instances) and 4 per instance, the guard's default outbound layer
    /// without and with the backend's queue reports, and tower-acc.
    pub const FLEET: [LimiterKind; 5] = [
        LimiterKind::Fixed(1),
        LimiterKind::Fixed(4),
        LimiterKind::Flowguard,
        LimiterKind::FlowguardQueue,
        LimiterKind::TowerAcc,
    ];

    /// The name used on the command line and in reports (`none`, `fixed4`, `flowguard`,
    /// `tower-acc`).
    pub fn name(&self) -> String {
        match self {
            Self::None => "none".into(),
            Self::Fixed(n) => format!("fixed{n}"),
            Self::Flowguard => "flowguard".into(),
            Self::FlowguardQueue => "flowguard-queue".into(),
            Self::TowerAcc => "tower-acc".into(),
        }
    }

    /// Reads `all` or a comma-separated list of names (`fixedN` for any N >= 1).
    pub fn parse_list(list: &str) -> Result<Vec<Self>, String> {
        if list == "all" {
            return Ok(Self::ALL.to_vec());
        }
        list.split(',').map(Self::parse).collect()
    }

    /// Reads one name (`fixedN` for any N >= 1).
    pub fn parse(name: &str) -> Result<Self, String> {
        match name {
            "none" => Ok(Self::None),
            "flowguard" => Ok(Self::Flowguard),
            "flowguard-queue" => Ok(Self::FlowguardQueue),
            "tower-acc" => Ok(Self::TowerAcc),
            _ => match name.strip_prefix("fixed").map(str::parse::<usize>) {
                Some(Ok(n)) if n >= 1 => Ok(Self::Fixed(n)),
                _ => Err(format!(
                    "unknown limiter `{name}`: use all, or a comma-separated list of none, fixedN (N >= 1), flowguard, flowguard-queue, tower-acc"
                )),
            },
        }
    }
}

/// One `GET` of the backend's work URL over a pooled keep-alive client, body read; answers the
/// status.
#[derive(Debug, Clone)]
pub struct HttpCall {
    client: reqwest::Client,
    url: reqwest::Url,
}

impl HttpCall {
    /// Calls `url` through `client`.
    pub fn new(client: reqwest::Client, url: reqwest::Url) -> Self {
        Self { client, url }
    }

    async fn send(client: reqwest::Client, url: reqwest::Url) -> Result<u16, reqwest::Error> {
        let response = client.get(url).send().await?;
        let status = response.status().as_u16();
        response.bytes().await?;
        Ok(status)
    }
}

type CallFuture = Pin<Box<dyn Future<Output = Result<u16, reqwest::Error>> + Send>>;

impl Service<()> for HttpCall {
    type Response = u16;
    type Error = reqwest::Error;
    type Future = CallFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, (): ()) -> Self::Future {
        Box::pin(Self::send(self.client.clone(), self.url.clone()))
    }
}

/// What happened to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered 2xx before the deadline.
    Ok,
    /// No permit within the wait: never sent.
    Shed,
    /// Sent, no answer before the deadline.
    Timeout,
    /// Answered with this non-2xx status.
    Rejected(u16),
    /// The connection failed.
    Transport,
}

impl Outcome {
    fn of(result: Result<Result<u16, reqwest::Error>, tokio::time::error::Elapsed>) -> Self {
        match result {
            Err(_) => Self::Timeout,
            Ok(Err(_)) => Self::Transport,
            Ok(Ok(status)) if (200..300).contains(&status) => Self::Ok,
            Ok(Ok(status)) => Self::Rejected(status),
        }
    }

    /// Whether a limiter should read this as overload: a timeout, a 5xx or 429, a failed
    /// connection.
    pub fn is_overload(&self) -> bool {
        match self {
            Self::Timeout | Self::Transport => true,
            Self::Rejected(status) => *status == 429 || *status >= 500,
            Self::Ok | Self::Shed => false,
        }
    }
}

/// tower-acc's classifier for the same rule: a failed call, a 5xx or a 429 is an error.
fn tower_acc_error(result: &Result<u16, reqwest::Error>) -> bool {
    match result {
        Err(_) => true,
        Ok(status) => *status == 429 || *status >= 500,
    }
}

/// A tower-acc algorithm that publishes its limit after each update, so the run can sample it.
struct Observed<A> {
    inner: A,
    limit: Arc<AtomicUsize>,
}

impl<A: tower_acc::Algorithm> tower_acc::Algorithm for Observed<A> {
    fn max_concurrency(&self) -> usize {
        self.inner.max_concurrency()
    }

    fn update(&mut self, rtt: Duration, num_inflight: usize, is_error: bool, is_canceled: bool) {
        self.inner.update(rtt, num_inflight, is_error, is_canceled);
        self.limit
            .store(self.inner.max_concurrency(), Ordering::Relaxed);
    }
}

type TowerAccService = tower_acc::ConcurrencyLimit<
    HttpCall,
    Observed<tower_acc::Vegas>,
    fn(&Result<u16, reqwest::Error>) -> bool,
>;

enum Admission {
    None(HttpCall),
    Fixed(tower::limit::ConcurrencyLimit<HttpCall>, usize),
    /// The guard's outbound layer over the `reqwest::Client` (a tower service of its own), and
    /// the guard's limiter.
    Flowguard(
        AdaptiveConcurrencyService<reqwest::Client, HttpClassifier>,
        Limiter,
        reqwest::Url,
    ),
    TowerAcc(TowerAccService, Arc<AtomicUsize>),
}

/// A limiter in front of the HTTP call, counting the requests in flight.
pub struct Gate {
    admission: Admission,
    in_flight: AtomicUsize,
}

/// Counts a request in flight while alive.
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Gate {
    /// `kind` in front of `call`, shedding a request that waits `wait` for a permit; the
    /// flowguard arms run Vegas with `vegas`.
    pub async fn new(
        kind: LimiterKind,
        call: HttpCall,
        wait: Duration,
        vegas: &VegasSettings,
    ) -> Result<Self, String> {
        let admission = match kind {
            LimiterKind::None => Admission::None(call),
            LimiterKind::Fixed(n) => {
                Admission::Fixed(tower::limit::ConcurrencyLimit::new(call, n), n)
            }
            LimiterKind::Flowguard | LimiterKind::FlowguardQueue => {
                let mut classifier = HttpClassifier::new();
                if kind == LimiterKind::Flowguard {
                    classifier = classifier.without_queue_timing();
                }
                // The guard's default limiter, with these settings.
                let vegas = vegas
                    .build()
                    .map_err(|e| format!("flowguard's Vegas: {e}"))?;
                let limiter = Limiter::builder(vegas).build().map_err(|e| e.to_string())?;
                let guard = Guard::builder()
                    .concurrency(limiter)
                    .acquire_timeout(wait)
                    .outbound_classifier(classifier)
                    .build()
                    .await
                    .map_err(|e| e.to_string())?;
                let service = guard.outbound_layer().layer(call.client.clone());
                Admission::Flowguard(service, guard.concurrency().clone(), call.url.clone())
            }
            LimiterKind::TowerAcc => {
                let vegas = tower_acc::Vegas::default();
                let limit = Arc::new(AtomicUsize::new(tower_acc::Algorithm::max_concurrency(
                    &vegas,
                )));
                let observed = Observed {
                    inner: vegas,
                    limit: limit.clone(),
                };
                let classify: fn(&Result<u16, reqwest::Error>) -> bool = tower_acc_error;
                let service =
                    tower_acc::ConcurrencyLimit::with_classifier(call, observed, classify);
                Admission::TowerAcc(service, limit)
            }
        };
        Ok(Self {
            admission,
            in_flight: AtomicUsize::new(0),
        })
    }

    /// The limit now (`None` without a limiter).
    pub fn limit(&self) -> Option<usize> {
        match &self.admission {
            Admission::None(_) => None,
            Admission::Fixed(_, n) => Some(*n),
            Admission::Flowguard(_, limiter, _) => Some(limiter.limit()),
            Admission::TowerAcc(_, limit) => Some(limit.load(Ordering::Relaxed)),
        }
    }

    /// Requests admitted and not yet answered or timed out.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// One request: waits up to `wait` for a permit, then calls with `deadline`.
    pub async fn call(&self, wait: Duration, deadline: Instant) -> Outcome {
        match &self.admission {
            Admission::None(call) => {
                let _counted = InFlight::enter(&self.in_flight);
                let answer = HttpCall::send(call.client.clone(), call.url.clone());
                Outcome::of(tokio::time::timeout_at(deadline, answer).await)
            }
            Admission::Fixed(service, _) => self.through(service.clone(), wait, deadline).await,
            Admission::TowerAcc(service, _) => self.through(service.clone(), wait, deadline).await,
            Admission::Flowguard(service, _, url) => {
                self.through_flowguard(service.clone(), url, deadline).await
            }
        }
    }

    /// The guard's outbound layer: ready within its wait (holding a permit, or to answer
    /// [`Shed`]), the request sent and its body read by `deadline`.
    async fn through_flowguard(
        &self,
        mut service: AdaptiveConcurrencyService<reqwest::Client, HttpClassifier>,
        url: &reqwest::Url,
        deadline: Instant,
    ) -> Outcome {
        let request = reqwest::Request::new(reqwest::Method::GET, url.clone());
        let ready = match service.ready().await {
            Ok(ready) => ready,
            Err(_) => return Outcome::Transport,
        };
        let _counted = InFlight::enter(&self.in_flight);
        let answer = async {
            let response = ready.call(request).await?;
            let status = response.status().as_u16();
            response.bytes().await?;
            Ok::<_, flowguard::backoff::BoxError>(status)
        };
        match tokio::time::timeout_at(deadline, answer).await {
            Err(_) => Outcome::Timeout,
            Ok(Err(error)) if error.is::<Shed>() => Outcome::Shed,
            Ok(Err(_)) => Outcome::Transport,
            Ok(Ok(status)) if (200..300).contains(&status) => Outcome::Ok,
            Ok(Ok(status)) => Outcome::Rejected(status),
        }
    }

    /// A tower service: ready within `wait` (it holds a permit then), called with `deadline`.
    async fn through<S>(&self, mut service: S, wait: Duration, deadline: Instant) -> Outcome
    where
        S: Service<(), Response = u16, Error = reqwest::Error>,
    {
        let ready = match tokio::time::timeout(wait, service.ready()).await {
            Err(_) => return Outcome::Shed,
            Ok(Err(_)) => return Outcome::Transport,
            Ok(Ok(ready)) => ready,
        };
        let _counted = InFlight::enter(&self.in_flight);
        Outcome::of(tokio::time::timeout_at(deadline, ready.call(())).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_lists_parse_and_name_round_trip() {
        let all = LimiterKind::parse_list("all").unwrap();
        let names: Vec<String> = all.iter().map(LimiterKind::name).collect();
        assert_eq!(
            names,
            ["none", "fixed4", "fixed16", "flowguard", "tower-acc"]
        );
        assert_eq!(LimiterKind::parse_list(&names.join(",")).unwrap(), all);
        assert_eq!(
            LimiterKind::parse_list("fixed7").unwrap(),
            [LimiterKind::Fixed(7)]
        );
    }

    #[test]
    fn unknown_limiters_are_refused_with_the_choices() {
        for bad in ["fixed0", "fixed", "flowguard2", ""] {
            let error = LimiterKind::parse_list(bad).unwrap_err();
            assert!(error.contains("tower-acc"), "{bad}: {error}");
        }
    }

    #[test]
    fn overload_is_a_timeout_a_failed_connection_a_5xx_or_a_429() {
        assert!(Outcome::Timeout.is_overload());
        assert!(Outcome::Transport.is_overload());
        assert!(Outcome::Rejected(503).is_overload());
        assert!(Outcome::Rejected(429).is_overload());
        assert!(!Outcome::Rejected(404).is_overload());
        assert!(!Outcome::Ok.is_overload());
    }
}
