//! [`KeyExtractor`]: which quota a request counts against.

use http::Request;

/// Picks the rate-limit key of a request (an API key, a client address, a tenant id).
///
/// Returning `None` lets the request through unlimited (e.g. health checks). Implemented for any
/// `Fn(&Request<B>) -> Option<Vec<u8>>`.
pub trait KeyExtractor<B>: Clone + Send + Sync + 'static {
    /// The key of `req`, or `None` to leave it unlimited.
    fn key(&self, req: &Request<B>) -> Option<Vec<u8>>;

    /// Tokens the request costs (default 1).
    fn cost(&self, _req: &Request<B>) -> u32 {
        1
    }
}

impl<B, F> KeyExtractor<B> for F
where
    F: Fn(&Request<B>) -> Option<Vec<u8>> + Clone + Send + Sync + 'static,
{
    fn key(&self, req: &Request<B>) -> Option<Vec<u8>> {
        self(req)
    }
}
