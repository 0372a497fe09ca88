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
