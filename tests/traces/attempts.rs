//! The retry engine and the tower retry layer run each attempt in a `tracing` span `attempt`
//! with its number. Each test installs its subscriber first (see main.rs):
//! `tracing` caches per call site whether anyone listens, and a test on another thread reaching
//! the call site with no subscriber could cache "no one".

use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowguard::Guard;
use flowguard::backoff::{BackoffBounds, BackoffStrategy, Classification, RetryPolicy};

/// Records the name and `attempt` field of every span created.
#[derive(Default, Clone)]
struct Spans(Arc<Mutex<Vec<String>>>);

impl tracing::Subscriber for Spans {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        struct Attempt(Option<u64>);
        impl tracing::field::Visit for Attempt {
            fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
                if field.name() == "attempt" {
                    self.0 = Some(value);
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        let mut attempt = Attempt(None);
        span.record(&mut attempt);
        let mut spans = self.0.lock().unwrap();
        spans.push(format!("{}:{:?}", span.metadata().name(), attempt.0));
        tracing::span::Id::from_u64(spans.len() as u64)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// A guard retrying up to `max_attempts` times, 10-50 ms apart, without a budget.
async fn retrying(max_attempts: u32) -> Guard {
    let bounds = BackoffBounds::new(Duration::from_millis(10), Duration::from_millis(50)).unwrap();
    let policy = RetryPolicy::builder()
        .backoff(BackoffStrategy::Decorrelated(bounds))
        .max_attempts(max_attempts)
        .without_budget()
        .seed(3)
        .build()
        .unwrap();
    Guard::builder().retry(policy).build().await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn each_attempt_runs_in_a_span_of_its_own() {
    let spans = Spans::default();
    let _default = tracing::subscriber::set_default(spans.clone());
    let guard = retrying(3).await;
    let result = guard
        .call(
            |attempt| async move { if attempt < 2 { Err("503") } else { Ok(attempt) } },
            |outcome: &Result<u32, &str>| match outcome {
                Err(_) => Classification::Retryable { retry_after: None },
                Ok(_) => Classification::NotRetryable,
            },
        )
        .await;
    assert_eq!(result.unwrap(), 2);
    let attempts: Vec<String> = spans
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.starts_with("attempt:"))
        .cloned()
        .collect();
    assert_eq!(attempts, ["attempt:Some(1)", "attempt:Some(2)"]);
}

/// The tower retry layer: each attempt runs inside its own `attempt` span, numbered, and the
/// request of each attempt carries that number in its extensions.
#[cfg(feature = "tower")]
#[tokio::test(start_paused = true)]
async fn the_tower_retry_layer_runs_each_attempt_in_a_span_of_its_own() {
    use flowguard::backoff::tower::Attempt;
    use tower::{ServiceBuilder, ServiceExt, service_fn};

    let spans = Spans::default();
    let _default = tracing::subscriber::set_default(spans.clone());
    let guard = retrying(4).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let recorded = Arc::clone(&seen);
    let recorder = spans.clone();
    let client = ServiceBuilder::new()
        .layer(guard.retry_layer())
        .service(service_fn(move |request: http::Request<String>| {
            let attempt = Attempt::of(&request).number();
            // The span of this attempt is the last one opened when the service is called.
            let current = recorder.0.lock().unwrap().last().cloned();
            recorded.lock().unwrap().push((attempt, current));
            let status = if attempt < 3 {
                http::StatusCode::SERVICE_UNAVAILABLE
            } else {
                http::StatusCode::OK
            };
            async move {
                let mut response = http::Response::new(());
                *response.status_mut() = status;
                Ok::<_, flowguard::backoff::BoxError>(response)
            }
        }));
    let response = client
        .oneshot(http::Request::new(String::new()))
        .await
        .unwrap();
    assert_eq!(response.status(), http::StatusCode::OK);
    let attempt_span = |n: u32| Some(format!("attempt:Some({n})"));
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (1, attempt_span(1)),
            (2, attempt_span(2)),
            (3, attempt_span(3))
        ]
    );
}
