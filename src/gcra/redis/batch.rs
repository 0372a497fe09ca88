//! [`Lane`]: group commit of independent decisions over one connection (standalone) or to one node
//! (cluster).
//!
//! A decision never waits for company. When nothing is in flight on its lane it is sent at once,
//! alone, by its own caller. While a call is in flight, decisions queue; when the call returns,
//! the queue (up to the lane's bound, in queue order) is sent as one call, and so on until the
//! queue is empty. So at low load every decision is one call of its own, as without coalescing,
//! and under load a call carries what queued during the previous one.
//!
//! A full queue (the lane's bound) does not wait for the call in flight: it is sent at once as
//! a further call, up to [`MAX_IN_FLIGHT`] calls in flight per lane. A round trip then no longer
//! caps a lane at one batch: the client builds and reads calls while Redis runs the one before.
//! A queue that is not full waits for a call in flight to return, so calls stay as large as
//! before and a second call costs Redis no more per decision.
//!
//! Calls of a lane are sent in the order their decisions were queued, one after the other on one
//! connection (or to one node), which runs them in that order: each decision is decided after
//! every decision queued before it. (A queued decision that its caller gave up on, e.g. on a
//! timeout, is dropped before it is sent, spending nothing.) A caller that gives up on a call in
//! flight does not hold up the lane: the queue passes on when its future is dropped. The queue's
//! calls are sent by spawned tasks, so no caller's future does the I/O of other callers'
//! decisions and cancelling one never strands another.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// The most calls in flight on one lane: the first, and one full batch sent while it is in flight.
pub(crate) const MAX_IN_FLIGHT: usize = 2;

/// The group commit of one connection or node.
pub(crate) struct Lane {
    max_batch: usize,
    state: Mutex<State>,
    /// Calls of this lane the server answered (if only with an error), for the timeout of the
    /// decisions queued behind them (see [`Lane::answered`]).
    answered: AtomicU64,
}

#[derive(Default)]
struct State {
    /// Calls of this lane in flight (or about to be sent), at most [`MAX_IN_FLIGHT`].
    in_flight: usize,
    queue: VecDeque<Waiting>,
}

impl State {
    /// Whether the queue is to be sent now, by a call that is not (or no longer) counted in
    /// flight: when no other call is in flight, or when the queue fills a call (a further call
    /// beside the one in flight). Drops the decisions whose callers gave up first.
    fn sends(&mut self, max_batch: usize) -> bool {
        self.queue.retain(|w| !w.reply.is_closed());
        !self.queue.is_empty() && (self.in_flight == 0 || self.queue.len() >= max_batch)
    }
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
            answered: AtomicU64::new(0),
        }
    }

    /// How many of this lane's calls the server has answered so far (a call that timed out or
    /// lost its connection is no answer): a decision queued behind calls is late only when no
    /// answer came for a whole timeout.
    pub(crate) fn answered(&self) -> u64 {
        self.answered.load(Ordering::Acquire)
    }

    /// Counts a call whose answers say the server answered.
    fn count<'a>(&self, answers: impl IntoIterator<Item = &'a Answer>) {
        let unanswered = |a: &Answer| {
            matches!(
                a,
                Err(CheckError::Store(StoreError::Unavailable(
                    Unavailable::Timeout { .. } | Unavailable::Connection
                )))
            )
        };
        if answers.into_iter().any(|a| !unanswered(a)) {
            self.answered.fetch_add(1, Ordering::AcqRel);
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
            if state.in_flight > 0 {
                let (reply, answer) = oneshot::channel();
                state.queue.push_back(Waiting { request, reply });
                if state.in_flight < MAX_IN_FLIGHT && state.queue.len() >= self.max_batch {
                    // A full batch: sent now, beside the call in flight.
                    state.in_flight += 1;
                    drop(state);
                    self.spawn_flush(caller);
                }
                Err(answer)
            } else {
                state.in_flight = 1;
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
                self.count([&answer]);
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

    /// A call in flight is over: send the queue if it is this call's to send (no other call in
    /// flight, or a full batch), otherwise leave it to the calls still in flight.
    fn pass_on<C: Caller>(self: &Arc<Self>, caller: &C) {
        let mut state = self.state.lock();
        state.in_flight -= 1;
        if state.sends(self.max_batch) {
            state.in_flight += 1;
            drop(state);
            self.spawn_flush(caller);
        }
    }

    /// Sends the queue from a task of its own, which holds one of the lane's calls in flight
    /// (already counted).
    fn spawn_flush<C: Caller>(self: &Arc<Self>, caller: &C) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let (lane, caller) = (self.clone(), caller.clone());
                runtime.spawn(async move { lane.flush(&caller).await });
            }
            Err(_) => {
                // No runtime to send from (it is shutting down): nobody is left to wait.
                let mut state = self.state.lock();
                state.queue.clear();
                state.in_flight -= 1;
            }
        }
    }

    /// Sends the queue, one call of up to `max_batch` decisions at a time, while it is this
    /// call's to send (see [`pass_on`](Self::pass_on)).
    async fn flush<C: Caller>(self: &Arc<Self>, caller: &C) {
        loop {
            let batch: Vec<Waiting> = {
                let mut state = self.state.lock();
                // The call this task holds is over (or, the first time, not yet sent): its
                // place goes to the queue only while the queue is this call's to send.
                state.in_flight -= 1;
                if !state.sends(self.max_batch) {
                    return;
                }
                state.in_flight += 1;
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
            self.count(&answers);
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

    /// Waits (a bounded number of turns) until `n` calls have been made.
    async fn until_held(recorder: &Recorder, n: usize) {
        for _ in 0..10_000 {
            if recorder.held.load(Ordering::SeqCst) >= n {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("{n} calls were never made: {:?}", recorder.calls.lock());
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
        assert_eq!(lane.state.lock().in_flight, 0, "idle again");
    }

    /// Lets every task spawned so far run until it waits (a current-thread runtime).
    async fn settle() {
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_full_queue_goes_beside_the_call_in_flight_and_no_further() {
        let lane = Arc::new(Lane::new(3));
        let recorder = Recorder::default();
        let held = || recorder.held.load(Ordering::SeqCst);
        let mut tasks = Vec::new();
        let decide = |key: u8| {
            let (lane, caller) = (lane.clone(), recorder.clone());
            tokio::spawn(async move { lane.decide(&caller, request(key)).await })
        };
        tasks.push(decide(0));
        until_held(&recorder, 1).await;
        // Not a full batch: 1 and 2 wait for the call in flight.
        tasks.extend([decide(1), decide(2)]);
        settle().await;
        assert_eq!(held(), 1, "a queue that is not full waits");
        // 3 fills the batch, which goes at once, beside the call in flight.
        tasks.push(decide(3));
        until_held(&recorder, 2).await;
        // Two full batches queue behind them: two calls are in flight already.
        tasks.extend((4..10).map(decide));
        settle().await;
        assert_eq!(held(), 2, "at most {MAX_IN_FLIGHT} calls in flight");
        // Each call that returns lets one full batch go.
        recorder.release.notify_one();
        until_held(&recorder, 3).await;
        settle().await;
        assert_eq!(held(), 3);
        recorder.release.notify_one();
        until_held(&recorder, 4).await;
        recorder.release.notify_one();
        recorder.release.notify_one();
        for (key, task) in tasks.into_iter().enumerate() {
            assert_eq!(task.await.unwrap().unwrap().decision.remaining, key as u32);
        }
        assert_eq!(
            recorder.calls.lock().clone(),
            vec![
                vec![vec![0]],
                vec![vec![1], vec![2], vec![3]],
                vec![vec![4], vec![5], vec![6]],
                vec![vec![7], vec![8], vec![9]],
            ],
            "calls in queue order, full but for the first"
        );
        assert_eq!(lane.state.lock().in_flight, 0, "idle again");
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

    /// A caller whose calls get no answer from the server (the client's timeout ends them).
    #[derive(Clone)]
    struct Unanswered;

    impl Caller for Unanswered {
        async fn alone(&self, _: &Request) -> Answer {
            let why = Unavailable::Timeout {
                after: Duration::from_millis(50),
            };
            Err(StoreError::Unavailable(why).into())
        }

        async fn together(&self, requests: &[Request]) -> Vec<Answer> {
            let mut answers = Vec::new();
            for r in requests {
                answers.push(self.alone(r).await);
            }
            answers
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn only_calls_the_server_answered_count_as_answers() {
        let lane = Arc::new(Lane::new(3));
        let recorder = Recorder::default();
        let call = {
            let (lane, recorder) = (lane.clone(), recorder.clone());
            tokio::spawn(async move { lane.decide(&recorder, request(0)).await })
        };
        until_held(&recorder, 1).await;
        assert_eq!(lane.answered(), 0, "in flight");
        recorder.release.notify_one();
        call.await.unwrap().unwrap();
        assert_eq!(lane.answered(), 1);
        // Timeouts and lost connections are no answer.
        assert!(lane.decide(&Unanswered, request(1)).await.is_err());
        assert_eq!(lane.answered(), 1);
    }
}
