//! The inbound layer served by hyper 1 on a real socket, inside `tokio::spawn`, over a shared
//! `Arc<dyn …>` limiter: the setup of every hyper server. That it compiles is half the test (the
//! future of a boxed, lifetime-generic check once made the spawned task fail to prove `Send`);
//! the other half is that the quota is enforced over the wire.
#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::sync::Arc;

use flowguard::gcra::layer::QuotaLayer;
use flowguard::gcra::{KeyedLimit, KeyedRateLimiter, Quota};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceBuilder;

/// Sends one `GET /` with `x-api-key: key` and returns the response's status line.
async fn get(addr: std::net::SocketAddr, key: &str) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET / HTTP/1.1\r\nhost: localhost\r\nx-api-key: {key}\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_dyn_store_serves_hyper_connections_in_spawned_tasks() {
    let store: Arc<dyn KeyedLimit> = Arc::new(KeyedRateLimiter::<Vec<u8>>::new(
        Quota::per_minute(1).unwrap(),
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        for _ in 0..3 {
            let (stream, _) = listener.accept().await.unwrap();
            let svc = ServiceBuilder::new()
                .layer(QuotaLayer::new(store.clone(), |req: &Request<Incoming>| {
                    req.headers()
                        .get("x-api-key")
                        .map(|v| v.as_bytes().to_vec())
                }))
                .service_fn(|_req: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(String::from("hello")))
                });
            // Each connection in its own task, as hyper servers do.
            tokio::spawn(async move {
                http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc))
                    .await
            })
            .await
            .unwrap()
            .unwrap();
        }
    });
    assert_eq!(get(addr, "alice").await, "HTTP/1.1 200 OK");
    assert_eq!(get(addr, "alice").await, "HTTP/1.1 429 Too Many Requests");
    assert_eq!(get(addr, "bob").await, "HTTP/1.1 200 OK");
    server.await.unwrap();
}
