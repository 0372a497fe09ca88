//! The inbound layer in front of a real tonic server on loopback, called by a real tonic client:
//! calls keyed by a metadata entry, the `Decision` reaching the service, refusals as gRPC
//! statuses (`RESOURCE_EXHAUSTED` in a trailers-only HTTP 200) carrying `retry-after` and the
//! rate-limit fields as metadata, with the ready-made [`GrpcRefusal`] and with a refusal built
//! from `tonic::Status`.
//!
//! In the harness, which holds tonic, so that the crate's own dev-dependencies stay lean.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use flowguard::clock::ManualClock;
use flowguard::gcra::layer::{
    GrpcRefusal, HeaderKey, MissingKey, Policy, QuotaLayer, Refusal, RefusalResponse,
};
use flowguard::gcra::{ConfigError, Decision, LimitSpec, MemoryLimitSet, Quota};
use flowguard::headers::{ServiceLimit, requested_wait};
use http::StatusCode;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};
use tonic_health::server::{HealthReporter, HealthService};

/// An in-memory set on a clock that stands still, so that the waits the server writes do not
/// depend on how long the calls take.
fn still(limits: &[LimitSpec]) -> Result<MemoryLimitSet<ManualClock>, ConfigError> {
    MemoryLimitSet::builder(limits.iter().map(LimitSpec::quota))
        .clock(ManualClock::new())
        .build()
}

/// Two calls per minute per `x-api-key`; calls without one are refused as unauthenticated.
fn quotas() -> QuotaLayer<MemoryLimitSet<ManualClock>, HeaderKey> {
    QuotaLayer::builder(HeaderKey::new("x-api-key").unwrap())
        .policy(Policy::per_key("per-minute", Quota::per_minute(2).unwrap()))
        .build_with(still)
        .unwrap()
        .missing_key(MissingKey::Reject(StatusCode::UNAUTHORIZED))
}

/// Serves the gRPC health service behind `layer` on a free loopback port; the service answers
/// `INTERNAL` unless the layer's `Decision` reached it. The server stops with the test's
/// runtime.
async fn serve<H: RefusalResponse<tonic::body::Body>>(
    layer: QuotaLayer<MemoryLimitSet<ManualClock>, HeaderKey, H>,
) -> SocketAddr {
    let reporter = HealthReporter::new();
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let health = HealthServer::with_interceptor(
        HealthService::from_health_reporter(reporter),
        |call: tonic::Request<()>| match call.extensions().get::<Decision>() {
            Some(_) => Ok(call),
            None => Err(Status::internal(
                "no rate-limit decision reached the service",
            )),
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    addr
}

async fn client(addr: SocketAddr) -> HealthClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

/// One health check with `x-api-key: key` (none for `None`).
async fn check(
    client: &mut HealthClient<Channel>,
    key: Option<&str>,
) -> Result<tonic::Response<tonic_health::pb::HealthCheckResponse>, Status> {
    let mut call = tonic::Request::new(HealthCheckRequest::default());
    if let Some(key) = key {
        call.metadata_mut()
            .insert("x-api-key", key.parse().unwrap());
    }
    client.check(call).await
}

#[tokio::test]
async fn tonic_calls_are_limited_per_metadata_key_and_refused_as_grpc_statuses() {
    let addr = serve(quotas().refusal(GrpcRefusal)).await;
    let mut client = client(addr).await;

    for left in ["1", "0"] {
        let ok = check(&mut client, Some("k1")).await.expect("within quota");
        assert_eq!(
            ok.get_ref().status(),
            ServingStatus::Serving,
            "the service answered"
        );
        let fields = ok.metadata().clone().into_headers();
        assert_eq!(fields["ratelimit-policy"], r#""per-minute";q=2;w=60"#);
        let limit = &ServiceLimit::from_headers(&fields).unwrap()[0];
        assert_eq!(limit.remaining().to_string(), left);
    }

    let refused = check(&mut client, Some("k1")).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(refused.message(), r#"over quota "per-minute""#);
    let fields = refused.metadata().clone().into_headers();
    assert_eq!(fields["retry-after"], "30");
    assert_eq!(fields["grpc-retry-pushback-ms"], "30000");
    assert_eq!(fields["ratelimit-policy"], r#""per-minute";q=2;w=60"#);
    assert_eq!(fields["ratelimit"], r#""per-minute";r=0;t=60"#);
    let wait = requested_wait(&fields, SystemTime::now(), None).unwrap();
    assert_eq!(
        wait.map(|w| w.delay()),
        Some(Duration::from_secs(30)),
        "flowguard's client reads the wait from the status's metadata"
    );

    assert!(
        check(&mut client, Some("k2")).await.is_ok(),
        "another key has its own quota"
    );
    let anonymous = check(&mut client, None).await.unwrap_err();
    assert_eq!(anonymous.code(), Code::Unauthenticated, "{anonymous:?}");
}

/// A refusal of the user's own, built with tonic's `Status`: the layer still adds the wait and
/// the rate-limit fields, which reach the client as the status's metadata.
#[derive(Clone, Copy)]
struct TonicRefusal;

impl RefusalResponse<tonic::body::Body> for TonicRefusal {
    fn respond(&self, refusal: &Refusal<'_>) -> http::Response<tonic::body::Body> {
        let policy = refusal.policy().map_or("", |p| p.as_str());
        Status::resource_exhausted(format!("quota {policy} spent, slow down")).into_http()
    }
}

#[tokio::test]
async fn a_refusal_built_from_a_tonic_status_keeps_the_layers_fields() {
    let addr = serve(quotas().refusal(TonicRefusal)).await;
    let mut client = client(addr).await;
    for _ in 0..2 {
        check(&mut client, Some("k1")).await.expect("within quota");
    }
    let refused = check(&mut client, Some("k1")).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(refused.message(), "quota per-minute spent, slow down");
    let fields = refused.metadata().clone().into_headers();
    assert_eq!(fields["retry-after"], "30");
    assert_eq!(fields["ratelimit"], r#""per-minute";r=0;t=60"#);
}
