//! Queue reports through the `Guard`, both ends as a user sets them up: the dependency serves
//! behind `WorkerQueueLayer`, and the caller's guard reads the reports in its reqwest client,
//! with no setting on either side (the metric `flowguard-queue`), or under a name both sides
//! give. The waits the dependency timed (on its manual clock) reach the guard's limit
//! algorithm with each success; a name only one side gives, or a classifier told not to read
//! reports, leaves plain successes; and when the dependency's queue is bounded and full, its `503`
//! reaches the algorithm as a dropped call.
#![cfg(all(feature = "axum", feature = "reqwest"))]

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, Route, get};
use flowguard::Guard;
use flowguard::clock::ManualClock;
use flowguard::vegas::worker_queue::{WorkerQueueLayer, WorkerQueueLayerBuilder};
use flowguard::vegas::{HttpClassifier, LimitAlgorithm, Limiter, Outcome, QueueTiming, Sample};
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tower::{Layer, Service};

/// A fixed limit that records the queue wait reported with each success, and the outcome of
/// each call finished without one.
struct Recording {
    limit: usize,
    queued: Arc<Mutex<Vec<Duration>>>,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
}

impl LimitAlgorithm for Recording {
    fn name(&self) -> &'static str {
        "recording"
    }

    fn limit(&self) -> usize {
        self.limit
    }

    fn update(&mut self, sample: &Sample) -> usize {
        self.outcomes.lock().push(sample.outcome);
        self.limit
    }

    fn update_queued(&mut self, _rtt_nanos: u64, _in_flight: usize, queued_nanos: u64) -> usize {
        self.queued.lock().push(Duration::from_nanos(queued_nanos));
        self.limit
    }
}

/// `GET /work`'s handler: answers once `answers` lets it (a permit each).
fn gated(answers: &Arc<Semaphore>) -> MethodRouter {
    let answers = answers.clone();
    get(move || async move { answers.acquire().await.unwrap().forget() })
}

/// A dependency behind `workers`: its `GET /work` answers once the semaphore lets it (a permit
/// each), served on a free loopback port. The URL of its `/work`, and the semaphore.
async fn serve_gated<L>(workers: L) -> (String, Arc<Semaphore>)
where
    L: Layer<Route> + Clone + Send + Sync + 'static,
    L::Service: Service<Request> + Clone + Send + Sync + 'static,
    <L::Service as Service<Request>>::Response: IntoResponse + 'static,
    <L::Service as Service<Request>>::Error: Into<Infallible> + 'static,
    <L::Service as Service<Request>>::Future: Send + 'static,
{
    let answers = Arc::new(Semaphore::new(0));
    let url = serve(Router::new().route("/work", gated(&answers)).layer(workers)).await;
    (url, answers)
}

/// What a guard's limit algorithm was told: the queue waits reported with successes, and the
/// outcomes of the calls finished without one.
struct Recorded {
    queued: Arc<Mutex<Vec<Duration>>>,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
}

/// A guard whose limit is a [`Recording`] algorithm at 4, with `classifier` as its outbound
/// classifier (the default when `None`).
async fn recording_guard(classifier: Option<HttpClassifier>) -> (Guard, Recorded) {
    let recorded = Recorded {
        queued: Arc::default(),
        outcomes: Arc::default(),
    };
    let algorithm = Recording {
        limit: 4,
        queued: recorded.queued.clone(),
        outcomes: recorded.outcomes.clone(),
    };
    let mut builder = Guard::builder().concurrency(Limiter::builder(algorithm).build().unwrap());
    if let Some(classifier) = classifier {
        builder = builder.outbound_classifier(classifier);
    }
    (builder.build().await.unwrap(), recorded)
}

/// Serves `app` on a free loopback port; the URL of its `/work`.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/work", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// Waits until `done` holds, 1 ms at a time, at most 10,000 times: the calls it waits for
/// cross real sockets. The caller asserts what it waited for.
async fn until(done: impl Fn() -> bool) {
    for _ in 0..10_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// What the caller's algorithm got from two calls through a guard built with `classifier` (the
/// default when `None`) against a dependency of one worker built by `workers`, the second call
/// waiting for the worker while the dependency's clock moves 3 ms: the queue waits reported with
/// successes, and the outcomes of the calls finished without one.
async fn two_calls_one_waiting(
    workers: WorkerQueueLayerBuilder,
    classifier: Option<HttpClassifier>,
) -> (Vec<Duration>, Vec<Outcome>) {
    // The dependency: one worker; its handler answers once the test lets it.
    let clock = ManualClock::new();
    let workers = workers.clock(clock.clone()).build().unwrap();
    assert_eq!(workers.workers(), 1);
    let (url, answers) = serve_gated(workers.clone()).await;

    // The caller: a guard whose outbound classifier is `classifier`.
    let (guard, recorded) = recording_guard(classifier).await;
    let client = guard.reqwest_client(reqwest::Client::new());
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move { client.get(url).send().await.unwrap().status() })
        })
        .collect();

    // Both calls reach the dependency (real sockets: wait for them, bounded); the second waits
    // for the worker while the dependency's clock moves 3 ms.
    until(|| workers.busy() == 1 && workers.waiting() == 1).await;
    assert_eq!((workers.busy(), workers.waiting()), (1, 1));
    clock.advance(Duration::from_millis(3));
    answers.add_permits(2);
    for call in calls {
        assert_eq!(call.await.unwrap(), 200);
    }
    assert_eq!(guard.concurrency().in_flight(), 0);

    let mut queued = recorded.queued.lock().clone();
    queued.sort();
    let outcomes = recorded.outcomes.lock().clone();
    (queued, outcomes)
}

#[tokio::test]
async fn with_no_setting_on_either_side_the_guard_learns_the_wait_the_worker_queue_reported() {
    let (queued, outcomes) = two_calls_one_waiting(WorkerQueueLayer::builder(1), None).await;
    assert_eq!(queued, [Duration::ZERO, Duration::from_millis(3)]);
    assert_eq!(outcomes, []);
}

#[tokio::test]
async fn a_metric_of_another_name_is_read_where_both_sides_name_it_and_none_without_reports() {
    let named = || QueueTiming::server_timing("queue").unwrap();

    let both_named = two_calls_one_waiting(
        WorkerQueueLayer::builder(1).queue_timing(named()),
        Some(HttpClassifier::new().queue_timing(named())),
    )
    .await;
    assert_eq!(both_named.0, [Duration::ZERO, Duration::from_millis(3)]);

    // The default classifier does not take the other name for its own: plain successes.
    let only_the_dependency_named =
        two_calls_one_waiting(WorkerQueueLayer::builder(1).queue_timing(named()), None).await;
    assert_eq!(
        only_the_dependency_named,
        (vec![], vec![Outcome::Success, Outcome::Success])
    );

    let reports_not_read = two_calls_one_waiting(
        WorkerQueueLayer::builder(1),
        Some(HttpClassifier::new().without_queue_timing()),
    )
    .await;
    assert_eq!(
        reports_not_read,
        (vec![], vec![Outcome::Success, Outcome::Success])
    );
}

#[tokio::test]
async fn a_full_queues_503_reaches_the_guards_limit_as_a_drop() {
    // The dependency: one worker and no place to wait; its handler answers once let.
    let workers = WorkerQueueLayer::builder(1).max_waiting(0).build().unwrap();
    let (url, answers) = serve_gated(workers.clone()).await;

    // The caller: a guard with the default outbound classifier.
    let (guard, Recorded { queued, outcomes }) = recording_guard(None).await;
    let client = guard.reqwest_client(reqwest::Client::new());
    let first = tokio::spawn({
        let (client, url) = (client.clone(), url.clone());
        async move { client.get(url).send().await.unwrap().status() }
    });
    until(|| workers.busy() == 1).await;
    assert_eq!(workers.busy(), 1);

    // The worker is busy and no one may wait: answered at once, and a drop for the limit.
    let second = client.get(&url).send().await.unwrap();
    assert_eq!(second.status(), 503);
    assert_eq!(*outcomes.lock(), [Outcome::Dropped]);
    answers.add_permits(1);
    assert_eq!(first.await.unwrap(), 200);
    // The first call, served, is a success with its (real-clock) wait reported.
    assert_eq!(*outcomes.lock(), [Outcome::Dropped]);
    assert_eq!(queued.lock().len(), 1);
    assert_eq!(guard.concurrency().in_flight(), 0);
}
