//! [`within`] and [`while_answered`]: a call bounded by the store's timeout, measured fairly on a
//! busy client.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

/// Runs `future` for at most `timeout`: `None` when it did not finish in time.
///
/// When the timer fires first, the future is polled once more after one turn of the scheduler
/// (the tasks already woken run first, the I/O driver included), so that a reply that reached
/// the client in time but was not read yet, because the client's threads were busy with other
/// work, is taken instead of being declared a timeout. That turn is the only wait added: a reply
/// that has not arrived by then is a timeout.
pub(super) async fn within<F: Future>(timeout: Duration, future: F) -> Option<F::Output> {
    let mut future = pin!(future);
    if let Ok(output) = tokio::time::timeout(timeout, future.as_mut()).await {
        return Some(output);
    }
    tokio::task::yield_now().await;
    poll_fn(|cx| match future.as_mut().poll(cx) {
        Poll::Ready(output) => Poll::Ready(Some(output)),
        Poll::Pending => Poll::Ready(None),
    })
    .await
}

/// Runs `future`, a decision queued behind other calls, until `timeout` passes without an answer
/// from the server to any of those calls (`answered()` counts them, and each one that comes
/// starts the timeout again), and for `cap` at most in all. `None` when it ran out.
///
/// So a decision waits while the server answers the calls before it, however many the client
/// has queued (a busy client sends and reads them late, not the server), up to `cap`; when the
/// server stops answering, every decision waiting on it gives up within one timeout.
pub(super) async fn while_answered<F: Future>(
    timeout: Duration,
    cap: Duration,
    answered: impl Fn() -> u64,
    future: F,
) -> Option<F::Output> {
    let mut future = pin!(future);
    let started = tokio::time::Instant::now();
    let mut seen = answered();
    loop {
        let left = cap.saturating_sub(started.elapsed());
        if let Some(output) = within(timeout.min(left), future.as_mut()).await {
            return Some(output);
        }
        let now = answered();
        if now == seen || started.elapsed() >= cap {
            return None;
        }
        seen = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A "connection task" woken at the same instant as the caller's timer, and run after it:
    /// the reply is there, unread, when the timer fires.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_reply_there_when_the_timer_fires_is_taken() {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let connection = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.send(42).unwrap();
        });
        // The connection task registers its timer first.
        tokio::task::yield_now().await;
        let reply = within(Duration::from_millis(50), rx).await;
        assert_eq!(reply.map(Result::unwrap), Some(42));
        connection.await.unwrap();
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_reply_later_than_one_turn_is_a_timeout() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let started = tokio::time::Instant::now();
        assert_eq!(within(Duration::from_millis(50), rx).await, None);
        assert_eq!(started.elapsed(), Duration::from_millis(50));
        drop(tx);
    }

    /// A decision queued behind calls that the server answers, 30 ms apart, waits 100 ms for its
    /// own answer with a 50 ms timeout; when the answers stop, it gives up one timeout later.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_timeout_restarts_with_each_answer_of_the_server() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let answered = std::sync::Arc::new(AtomicU64::new(0));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let server = {
            let answered = answered.clone();
            tokio::spawn(async move {
                for _ in 0..3 {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    answered.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                tx.send(7).unwrap();
            })
        };
        let count = || answered.load(Ordering::SeqCst);
        let started = tokio::time::Instant::now();
        let (timeout, cap) = (Duration::from_millis(50), Duration::from_millis(200));
        let reply = while_answered(timeout, cap, count, rx).await;
        assert_eq!(reply.map(Result::unwrap), Some(7));
        assert_eq!(started.elapsed(), Duration::from_millis(100));
        server.await.unwrap();
        // No answer at all: one timeout.
        let (_tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let started = tokio::time::Instant::now();
        assert_eq!(while_answered(timeout, cap, count, rx).await, None);
        assert_eq!(started.elapsed(), timeout);
        // Answers that keep coming, never its own: the cap.
        let ticker = {
            let answered = answered.clone();
            tokio::spawn(async move {
                for _ in 0..20 {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    answered.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        let (_tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let started = tokio::time::Instant::now();
        assert_eq!(while_answered(timeout, cap, count, rx).await, None);
        assert_eq!(started.elapsed(), cap);
        ticker.abort();
    }
}
