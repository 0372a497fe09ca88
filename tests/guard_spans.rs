//! The retry engine runs each attempt in a `tracing` span `attempt` with its number. Alone in its
//! test binary: `tracing` caches per call site whether anyone listens, and a test on another
//! thread reaching the call site while this one installs its subscriber could cache "no one".

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

#[tokio::test(start_paused = true)]
async fn each_attempt_runs_in_a_span_of_its_own() {
    let bounds = BackoffBounds::new(Duration::from_millis(10), Duration::from_millis(50)).unwrap();
    let spans = Spans::default();
    let _default = tracing::subscriber::set_default(spans.clone());
    let guard = Guard::builder()
        .retry(
            RetryPolicy::builder()
                .backoff(BackoffStrategy::Decorrelated(bounds))
                .max_attempts(3)
                .without_budget()
                .seed(3)
                .build()
                .unwrap(),
        )
        .build()
        .await
        .unwrap();
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
