//! The futures of checks: [`CheckFuture`] (one key) and [`SetFuture`] (several demands decided
//! together), each ready at once when no I/O was needed.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::decisions::Decisions;
use super::error::CheckError;
use super::set_error::SetError;
use crate::gcra::Decision;

/// An answer that is there already, or work (I/O) that produces it, boxed.
enum Answer<T> {
    /// Decided already; `None` once taken.
    Ready(Option<T>),
    /// Deciding.
    Pending(Pin<Box<dyn Future<Output = T> + Send>>),
}

impl<T> Answer<T> {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<T> {
        match self {
            Answer::Ready(answer) => match answer.take() {
                Some(answer) => Poll::Ready(answer),
                // Polled after completion: a caller's bug, answered without a panic.
                None => Poll::Pending,
            },
            Answer::Pending(work) => work.as_mut().poll(cx),
        }
    }

    fn into_ready(self) -> Result<T, Answer<T>> {
        match self {
            Answer::Ready(Some(answer)) => Ok(answer),
            other => Err(other),
        }
    }

    fn state(&self) -> &'static str {
        match self {
            Answer::Ready(Some(_)) => "ready",
            Answer::Ready(None) => "taken",
            Answer::Pending(_) => "pending",
        }
    }
}

/// The future [`KeyedLimit::check`](super::KeyedLimit::check) returns: `Send` and `'static`, so it
/// can be awaited anywhere, inside `tokio::spawn` and inside middleware futures, without borrowing
/// the limiter or the key.
///
/// An in-memory limiter decides inside `check` and returns a ready future (no allocation); a
/// limiter that asks a shared store returns its work boxed.
#[must_use = "futures do nothing unless awaited"]
pub struct CheckFuture {
    answer: Answer<Result<Decision, CheckError>>,
}

impl CheckFuture {
    /// A check that has its answer already.
    pub fn ready(answer: Result<Decision, CheckError>) -> CheckFuture {
        CheckFuture {
            answer: Answer::Ready(Some(answer)),
        }
    }

    /// A check that still has work to do (I/O); the future must own what it uses.
    pub fn new(
        work: impl Future<Output = Result<Decision, CheckError>> + Send + 'static,
    ) -> CheckFuture {
        CheckFuture {
            answer: Answer::Pending(Box::pin(work)),
        }
    }

    /// The answer, if the check has it already (an in-memory check); otherwise the future back,
    /// to be awaited.
    pub fn into_ready(self) -> Result<Result<Decision, CheckError>, CheckFuture> {
        self.answer
            .into_ready()
            .map_err(|answer| CheckFuture { answer })
    }
}

impl Future for CheckFuture {
    type Output = Result<Decision, CheckError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().answer.poll(cx)
    }
}

impl std::fmt::Debug for CheckFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckFuture")
            .field("state", &self.answer.state())
            .finish()
    }
}

/// The future [`LimitSet::check_all`](super::LimitSet::check_all) returns: `Send` and `'static`
/// like [`CheckFuture`], ready at once when the set decided in memory.
#[must_use = "futures do nothing unless awaited"]
pub struct SetFuture {
    answer: Answer<Result<Decisions, SetError>>,
}

impl SetFuture {
    /// Demands decided already.
    pub fn ready(answer: Result<Decisions, SetError>) -> SetFuture {
        SetFuture {
            answer: Answer::Ready(Some(answer)),
        }
    }

    /// Demands still being decided (I/O); the future must own what it uses.
    pub fn new(
        work: impl Future<Output = Result<Decisions, SetError>> + Send + 'static,
    ) -> SetFuture {
        SetFuture {
            answer: Answer::Pending(Box::pin(work)),
        }
    }

    /// The answer, if the set has it already (in memory); otherwise the future back.
    pub fn into_ready(self) -> Result<Result<Decisions, SetError>, SetFuture> {
        self.answer
            .into_ready()
            .map_err(|answer| SetFuture { answer })
    }
}

impl Future for SetFuture {
    type Output = Result<Decisions, SetError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().answer.poll(cx)
    }
}

impl std::fmt::Debug for SetFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetFuture")
            .field("state", &self.answer.state())
            .finish()
    }
}
