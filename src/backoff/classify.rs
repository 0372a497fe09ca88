//! Which transport errors are worth a retry: [`ErrorClassifier`] and the default
//! [`TransientErrors`] (connection failures and timeouts).

use std::error::Error;
use std::io;

/// Decides whether a transport error (no response at all) is worth a retry.
///
/// Implemented by [`TransientErrors`] and by any `Fn(&E) -> bool`.
pub trait ErrorClassifier<E> {
    /// `true` when another attempt may succeed.
    fn is_retryable(&self, error: &E) -> bool;
}

impl<E, F: Fn(&E) -> bool> ErrorClassifier<E> for F {
    fn is_retryable(&self, error: &E) -> bool {
        self(error)
    }
}

/// The default classifier: connection errors and timeouts, found anywhere in the error's
/// `source()` chain (see [`is_transient`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct TransientErrors;

/// A boxed error as used by `tower` services.
pub type BoxError = Box<dyn Error + Send + Sync>;

impl ErrorClassifier<BoxError> for TransientErrors {
    fn is_retryable(&self, error: &BoxError) -> bool {
        is_transient(error.as_ref())
    }
}

impl ErrorClassifier<io::Error> for TransientErrors {
    fn is_retryable(&self, error: &io::Error) -> bool {
        is_transient(error)
    }
}

/// A `reqwest::Client`'s own errors (feature `reqwest`), e.g. for
/// [`HttpRetry`](super::tower::HttpRetry) over a `reqwest::Client` in a tower stack, or
/// [`HttpRetryPolicy::classify_error`](super::HttpRetryPolicy::classify_error) in a loop of
/// your own: connection failures and timeouts are retried; a request built wrong (a URL that
/// cannot be used, a bad header), a request body that failed, or a response that could not be
/// decoded are not. See [`is_transient`].
#[cfg(feature = "reqwest")]
impl ErrorClassifier<::reqwest::Error> for TransientErrors {
    fn is_retryable(&self, error: &::reqwest::Error) -> bool {
        is_transient(error)
    }
}

/// `true` when `error` or one of its sources is a connection failure or timeout:
/// an [`io::Error`] of kind `ConnectionRefused`, `ConnectionReset`, `ConnectionAborted`,
/// `NotConnected`, `BrokenPipe`, `TimedOut` or `UnexpectedEof`, a `tokio` timeout, a `tower`
/// timeout (feature `tower`) or a `reqwest` connect/timeout error (feature `reqwest`). A
/// `reqwest` error building the request, of a body or of decoding a response (that is not a
/// timeout) is not, whatever its sources say (a response body cut short by a reset connection
/// included): the same request would be built or streamed the same way again, and a response
/// being read has already been handed over, so no retry policy can repeat it.
///
/// ```
/// use std::io;
/// use flowguard::backoff::is_transient;
///
/// assert!(is_transient(&io::Error::from(io::ErrorKind::ConnectionRefused)));
/// assert!(!is_transient(&io::Error::from(io::ErrorKind::PermissionDenied)));
/// ```
pub fn is_transient(error: &(dyn Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            use io::ErrorKind::*;
            if matches!(
                io.kind(),
                ConnectionRefused
                    | ConnectionReset
                    | ConnectionAborted
                    | NotConnected
                    | BrokenPipe
                    | TimedOut
                    | UnexpectedEof
            ) {
                return true;
            }
        }
        if e.is::<tokio::time::error::Elapsed>() {
            return true;
        }
        #[cfg(feature = "tower")]
        if e.is::<::tower::timeout::error::Elapsed>() {
            return true;
        }
        #[cfg(feature = "reqwest")]
        if let Some(r) = e.downcast_ref::<::reqwest::Error>() {
            if r.is_connect() || r.is_timeout() {
                return true;
            }
            if r.is_builder() || r.is_body() || r.is_decode() {
                return false;
            }
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrapper(io::Error);
    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "wrapped")
        }
    }
    impl Error for Wrapper {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn walks_the_source_chain() {
        let e: BoxError = Box::new(Wrapper(io::ErrorKind::ConnectionReset.into()));
        assert!(TransientErrors.is_retryable(&e));
        let e: BoxError = Box::new(Wrapper(io::ErrorKind::InvalidData.into()));
        assert!(!TransientErrors.is_retryable(&e));
        let e: BoxError = "plain".into();
        assert!(!TransientErrors.is_retryable(&e));
        let custom = |e: &u8| *e == 1;
        assert!(custom.is_retryable(&1));
    }
}
