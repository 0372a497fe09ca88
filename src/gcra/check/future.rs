//! [`CheckFuture`]: the future of one keyed check, ready at once when no I/O was needed.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::error::CheckError;
use crate::gcra::Decision;

/// The future [`KeyedLimit::check`](super::KeyedLimit::check) returns: `Send` and `'static`, so it
/// can be awaited anywhere, inside `tokio::spawn` and inside middleware futures, without borrowing
/// the limiter or the key.
///
/// An in-memory limiter decides inside `check` and returns a ready future (no allocation); a
/// limiter that asks a shared store returns its work boxed.
#[must_use = "futures do nothing unless awaited"]
pub struct CheckFuture {
    state: State,
}

enum State {
    /// Decided already; `None` once taken.
    Ready(Option<Result<Decision, CheckError>>),
    /// Deciding.
    Pending(Pin<Box<dyn Future<Output = Result<Decision, CheckError>> + Send>>),
}

impl CheckFuture {
    /// A check that has its answer already.
    pub fn ready(answer: Result<Decision, CheckError>) -> CheckFuture {
        CheckFuture {
            state: State::Ready(Some(answer)),
        }
    }

    /// A check that still has work to do (I/O); the future must own what it uses.
    pub fn new(
        work: impl Future<Output = Result<Decision, CheckError>> + Send + 'static,
    ) -> CheckFuture {
        CheckFuture {
            state: State::Pending(Box::pin(work)),
        }
    }
}

impl Future for CheckFuture {
    type Output = Result<Decision, CheckError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.get_mut().state {
            State::Ready(answer) => match answer.take() {
                Some(answer) => Poll::Ready(answer),
                // Polled after completion: a caller's bug, answered without a panic.
                None => Poll::Pending,
            },
            State::Pending(work) => work.as_mut().poll(cx),
        }
    }
}

impl std::fmt::Debug for CheckFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Ready(Some(_)) => "ready",
            State::Ready(None) => "taken",
            State::Pending(_) => "pending",
        };
        f.debug_struct("CheckFuture")
            .field("state", &state)
            .finish()
    }
}
