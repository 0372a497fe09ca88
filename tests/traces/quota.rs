//! Quota decisions are made inside a `quota_decision` span recording the tier, the policy that
//! decided and the outcome: the inbound layer's and `Guard::admit`'s alike, for a limit that
//! decides at once (in memory) and for one that decides while polled (I/O). The limit here logs
//! while it decides, and the subscriber notes which span that event is in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use flowguard::Guard;
use flowguard::clock::ManualClock;
use flowguard::gcra::{CheckFuture, KeyedLimit, KeyedRateLimiter, Quota};

/// Spans by id (name and recorded fields), the stack of entered spans, and for each event of
/// this test the span it happened in (`None`: outside any span).
#[derive(Default)]
struct Seen {
    spans: HashMap<u64, (String, HashMap<String, String>)>,
    entered: Vec<u64>,
    events: Vec<Option<u64>>,
}

#[derive(Default, Clone)]
struct Spans(Arc<Mutex<Seen>>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl tracing::Subscriber for Spans {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut fields = HashMap::new();
        span.record(&mut Fields(&mut fields));
        let mut seen = self.0.lock().unwrap();
        let id = seen.spans.len() as u64 + 1;
        seen.spans
            .insert(id, (span.metadata().name().to_owned(), fields));
        tracing::span::Id::from_u64(id)
    }
    fn record(&self, id: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut seen = self.0.lock().unwrap();
        if let Some((_, fields)) = seen.spans.get_mut(&id.into_u64()) {
            values.record(&mut Fields(fields));
        }
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if event.metadata().target() != module_path!() {
            return;
        }
        let mut seen = self.0.lock().unwrap();
        let current = seen.entered.last().copied();
        seen.events.push(current);
    }
    fn enter(&self, id: &tracing::span::Id) {
        self.0.lock().unwrap().entered.push(id.into_u64());
    }
    fn exit(&self, id: &tracing::span::Id) {
        let mut seen = self.0.lock().unwrap();
        let at = seen.entered.iter().rposition(|e| *e == id.into_u64());
        seen.entered.remove(at.expect("exits a span it entered"));
    }
}

/// An in-memory limit that logs while it decides: in `check` itself (`polled: false`), or
/// while its future is polled after a yield (`polled: true`), as a limit doing I/O does.
struct Logging {
    limiter: Arc<KeyedRateLimiter<Vec<u8>, ManualClock>>,
    polled: bool,
}

impl KeyedLimit for Logging {
    fn check(&self, key: &[u8], cost: u32) -> CheckFuture {
        if !self.polled {
            tracing::info!("deciding");
            return KeyedLimit::check(&*self.limiter, key, cost);
        }
        let (limiter, key) = (self.limiter.clone(), key.to_vec());
        CheckFuture::new(async move {
            tokio::task::yield_now().await;
            tracing::info!("deciding");
            KeyedLimit::check(&*limiter, &key, cost).await
        })
    }

    fn quota(&self) -> Quota {
        KeyedLimit::quota(&*self.limiter)
    }
}

fn logging(polled: bool) -> Logging {
    let limiter = KeyedRateLimiter::<Vec<u8>>::builder(Quota::per_minute(1).unwrap())
        .clock(ManualClock::new())
        .build()
        .unwrap();
    Logging {
        limiter: Arc::new(limiter),
        polled,
    }
}

/// The span each decision's event was in, as (name, tier, policy, outcome) once recorded; the
/// events are taken.
fn decided_in(spans: &Spans) -> Vec<(String, String, String, String)> {
    let mut seen = spans.0.lock().unwrap();
    let events = std::mem::take(&mut seen.events);
    events
        .into_iter()
        .map(|span| {
            let id = span.expect("the decision is made inside a span");
            let (name, fields) = &seen.spans[&id];
            let field = |f: &str| fields.get(f).cloned().unwrap_or_default();
            (
                name.clone(),
                field("tier"),
                field("policy"),
                field("outcome"),
            )
        })
        .collect()
}

#[tokio::test]
async fn decisions_are_made_inside_a_quota_decision_span() {
    let spans = Spans::default();
    let _default = tracing::subscriber::set_default(spans.clone());
    let span = |outcome: &str| {
        (
            "quota_decision".to_owned(),
            "default".to_owned(),
            "default".to_owned(),
            outcome.to_owned(),
        )
    };
    let expected = vec![span("allowed"), span("denied")];

    for polled in [false, true] {
        let guard = Guard::builder()
            .rate_limit(logging(polled))
            .build()
            .await
            .unwrap();
        assert!(guard.admit(b"k").await.unwrap().allowed);
        assert!(!guard.admit(b"k").await.unwrap().allowed);
        assert_eq!(
            decided_in(&spans),
            expected,
            "Guard::admit, polled {polled}"
        );
    }

    #[cfg(feature = "tower")]
    for polled in [false, true] {
        use flowguard::gcra::layer::{HeaderKey, QuotaLayer};
        use http::{Request, Response, StatusCode};
        use tower::{ServiceBuilder, ServiceExt};

        let layer = QuotaLayer::new(
            Arc::new(logging(polled)),
            HeaderKey::new("x-api-key").unwrap(),
        );
        let svc = ServiceBuilder::new()
            .layer(layer)
            .service_fn(|_: Request<()>| async {
                Ok::<_, std::convert::Infallible>(Response::new(String::new()))
            });
        let request = || {
            Request::builder()
                .header("x-api-key", "k")
                .body(())
                .unwrap()
        };
        let first = svc.clone().oneshot(request()).await.unwrap();
        assert_eq!(first.status(), StatusCode::OK);
        let second = svc.clone().oneshot(request()).await.unwrap();
        assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(decided_in(&spans), expected, "the layer, polled {polled}");
    }
}
