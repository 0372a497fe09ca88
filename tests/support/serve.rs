//! Real axum servers on loopback ports, served with the peer address in `ConnectInfo`, as an
//! application serves them.

use std::net::SocketAddr;

/// Serves `app` on a free port of `ip` (`127.0.0.1`, `::1`): its base URL, or why the address
/// cannot be bound (a machine without IPv6).
pub async fn serve_on(ip: std::net::IpAddr, app: axum::Router) -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, 0)).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    Ok(format!("http://{addr}"))
}

/// Serves `app` on a free port of 127.0.0.1: its base URL.
pub async fn serve(app: axum::Router) -> String {
    serve_on([127, 0, 0, 1].into(), app)
        .await
        .expect("127.0.0.1 can be bound")
}

/// `clients` clients at once, client `i` sending `requests` requests one after another to `url`
/// with `x-api-key: client-<i>`: each client's key and how many of its requests were allowed
/// (`200`; the others must be `429`).
#[cfg(feature = "reqwest")]
pub async fn race_clients(url: &str, clients: usize, requests: usize) -> Vec<(String, u32)> {
    let client = reqwest::Client::new();
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let (client, url) = (client.clone(), url.to_owned());
            tokio::spawn(async move {
                let key = format!("client-{i}");
                let mut admitted = 0u32;
                for _ in 0..requests {
                    let response = client.get(&url).header("x-api-key", &key).send().await;
                    match response.unwrap().status() {
                        http::StatusCode::OK => admitted += 1,
                        http::StatusCode::TOO_MANY_REQUESTS => {}
                        other => panic!("unexpected {other}"),
                    }
                }
                (key, admitted)
            })
        })
        .collect();
    let mut admitted = Vec::with_capacity(clients);
    for task in tasks {
        admitted.push(task.await.unwrap());
    }
    admitted
}
