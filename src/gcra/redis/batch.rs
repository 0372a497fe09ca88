//! [`Lane`]: group commit of independent decisions over one connection (standalone) or to one node
//! (cluster).
//!
//! A decision never waits for company. When nothing is in flight on its lane it is sent at once,
//! alone, by its own caller. While a call is in flight, decisions queue; when the call returns,
//! the queue (up to the lane's bound, in queue order) is sent as one call, and so on until the
//! queue is empty. So at low load every decision is one call of its own, as without coalescing,
//! and under load a call carries what queued during the previous one.
//!
//! One call is in flight per lane, so calls of one lane are decided in the order they were queued
//! (a queued decision that its caller gave up on, e.g. on a timeout, is dropped before it is sent,
//! spending nothing). A caller that gives up on a call in flight does not hold up the lane: the
//! queue passes on when its future is dropped. The queue's calls are sent by a spawned task, so
//! no caller's future does the I/O of other callers' decisions and cancelling one never strands
//! another.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::script::Request;
use crate::gcra::CheckError;
use crate::gcra::remote::{StoreDecision, StoreError, Unavailable};

/// What answers a decision.
pub(crate) type Answer = Result<StoreDecision, CheckError>;

/// Sends the calls of a lane: the store, seen from its lanes.
pub(crate) trait Caller: Clone + Send + Sync + 'static {
    /// One call deciding `request` alone.
    fn alone(&self, request: &Request) -> impl Future<Output = Answer> + Send;

    /// One call deciding `requests` (at least two) independently, each exactly as if alone, in
    /// order: one answer per request.
    fn together(&self, requests: &[Request]) -> impl Future<Output = Vec<Answer>> + Send;
}

/// The group commit of one connection or node.
pub(crate) struct Lane {
    max_batch: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// A call of this lane is in flight (or about to be sent).
    busy: bool,
    queue: VecDeque<Waiting>,
}

struct Waiting {
    request: Request,
    reply: oneshot::Sender<Answer>,
}

impl Lane {
    /// A lane sending at most `max_batch` decisions per call (at least 2).
    pub(crate) fn new(max_batch: usize) -> Lane {
        Lane {
            max_batch,
            state: Mutex::new(State::default()),
        }
    }

    /// Decides `request`: at once when the lane is idle, otherwise in the lane's next call.
    pub(crate) async fn decide<C: Caller>(
        self: &Arc<Self>,
        caller: &C,
        request: Request,
    ) -> Answer {
        let queued = {
            let mut state = self.state.lock();
            if state.busy {
                let (reply, answer) = oneshot::channel();
                state.queue.push_back(Waiting { request, reply });
                Err(answer)
            } else {
                state.busy = true;
                Ok(request)
            }
        };
        match queued {
            Ok(request) => {
                let turn = Turn {
                    lane: self.clone(),
                    caller: caller.clone(),
                };
                let answer = caller.alone(&request).await;
                drop(turn);
                answer
            }
            // The sender is gone only if the task sending the queue ended without answering
            // (its runtime shut down).
            Err(answer) => answer
                .await
                .unwrap_or(Err(StoreError::Unavailable(Unavailable::Connection).into())),
        }
    }

    /// The call in flight is over: send the queue, or mark the lane idle.
    fn pass_on<C: Caller>(self: &Arc<Self>, caller: &C) {
        let mut state = self.state.lock();
        state.queue.retain(|w| !w.reply.is_closed());
        if state.queue.is_empty() {
            state.busy = false;
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                drop(state);
                let (lane, caller) = (self.clone(), caller.clone());
                runtime.spawn(async move { lane.flush(&caller).await });
            }
            Err(_) => {
                // No runtime to send from (it is shutting down): nobody is left to wait.
                state.queue.clear();
                state.busy = false;
            }
        }
    }

    /// Sends the queue, one call of up to `max_batch` decisions at a time, until it is empty.
    async fn flush<C: Caller>(self: &Arc<Self>, caller: &C) {
        loop {
            let batch: Vec<Waiting> = {
                let mut state = self.state.lock();
                state.queue.retain(|w| !w.reply.is_closed());
                if state.queue.is_empty() {
                    state.busy = false;
                    return;
                }
                let n = state.queue.len().min(self.max_batch);
                state.queue.drain(..n).collect()
            };
            let (requests, replies): (Vec<Request>, Vec<oneshot::Sender<Answer>>) =
                batch.into_iter().map(|w| (w.request, w.reply)).unzip();
            let answers = if requests.len() == 1 {
                vec![caller.alone(&requests[0]).await]
            } else {
                caller.together(&requests).await
            };
            for (reply, answer) in replies.into_iter().zip(answers) {
                // A caller that gave up meanwhile no longer listens.
                let _ = reply.send(answer);
            }
        }
    }
}

/// The turn of a caller sending its own decision; passes the lane on when dropped, also when the
/// caller gives up mid-call.
struct Turn<C: Caller> {
    lane: Arc<Lane>,
    caller: C,
}

impl<C: Caller> Drop for Turn<C> {
    fn drop(&mut self) {
        self.lane.pass_on(&self.caller);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcra::{Decision, Gcra, Quota};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::sync::Notify;

    /// Records the calls; each call waits for `release` before answering.
    #[derive(Clone, Default)]
    struct Recorder {
        calls: Arc<Mutex<Vec<Vec<Vec<u8>>>>>,
        release: Arc<Notify>,
        held: Arc<AtomicUsize>,
    }

    fn answer(request: &Request) -> Answer {
        let d = Decision::new(true, 1, request.key[0].into(), None, Duration::ZERO);
        Ok(StoreDecision::new(d, Duration::ZERO))
    }

    impl Caller for Recorder {
        async fn alone(&self, request: &Request) -> Answer {
            self.calls.lock().push(vec![request.key.clone()]);
            self.held.fetch_add(1, Ordering::SeqCst);
            self.release.notified().await;
            answer(request)
        }

        async fn together(&self, requests: &[Request]) -> Vec<Answer> {
            self.calls
                .lock()
                .push(requests.iter().map(|r| r.key.clone()).collect());
            self.held.fetch_add(1, Ordering::SeqCst);
            self.release.notified().await;
            requests.iter().map(answer).collect()
        }
    }

    fn request(key: u8) -> Request {
        let rule = Gcra::new(&Quota::per_second(10).unwrap());
        Request::new(vec![key], &rule, 1, None, 0).unwrap()
    }

    async fn until_held(recorder: &Recorder, n: usize) {
        while recorder.held.load(Ordering::SeqCst) < n {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn decisions_queued_behind_a_call_go_together_in_queue_order() {
        let lane = Arc::new(Lane::new(3));
        let recorder = Recorder::default();
        let mut tasks = Vec::new();
        for key in 0..6u8 {
            let (lane, caller) = (lane.clone(), recorder.clone());
            tasks.push(tokio::spawn(async move {
                lane.decide(&caller, request(key)).await
            }));
            // The first decision is sent alone and held; the others queue behind it.
            until_held(&recorder, 1).await;
            tokio::task::yield_now().await;
        }
        for held in 1..=3 {
            until_held(&recorder, held).await;
            recorder.release.notify_one();
        }
        for (key, task) in tasks.into_iter().enumerate() {
            let d = task.await.unwrap().unwrap();
            assert_eq!(
                d.decision.remaining, key as u32,
                "each caller gets its own answer"
            );
        }
        let calls = recorder.calls.lock().clone();
        assert_eq!(
            calls,
            vec![
                vec![vec![0]],
                vec![vec![1], vec![2], vec![3]],
                vec![vec![4], vec![5]]
            ]
        );
        assert!(!lane.state.lock().busy, "idle again");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_caller_that_gives_up_spends_nothing_and_holds_up_nobody() {
        let lane = Arc::new(Lane::new(8));
        let recorder = Recorder::default();
        let first = {
            let (lane, recorder) = (lane.clone(), recorder.clone());
            tokio::spawn(async move { lane.decide(&recorder, request(0)).await })
        };
        until_held(&recorder, 1).await;
        // Queued, then given up before it is sent.
        let gone = {
            let (lane, recorder) = (lane.clone(), recorder.clone());
            tokio::spawn(async move { lane.decide(&recorder, request(1)).await })
        };
        let kept = {
            let (lane, recorder) = (lane.clone(), recorder.clone());
            tokio::spawn(async move { lane.decide(&recorder, request(2)).await })
        };
        tokio::task::yield_now().await;
        gone.abort();
        let _ = gone.await;
        // The caller of the call in flight gives up too: the queue is sent anyway.
        first.abort();
        let _ = first.await;
        until_held(&recorder, 2).await;
        recorder.release.notify_one();
        assert_eq!(kept.await.unwrap().unwrap().decision.remaining, 2);
        assert_eq!(
            recorder.calls.lock().clone(),
            vec![vec![vec![0]], vec![vec![2]]],
            "the abandoned decision was never sent"
        );
    }
}
