//! Waiting for an owned request to come back, blocking: poll for a few
//! microseconds, then sleep on the CQ's completion channel (or, without
//! one, in short naps) until a completion or the deadline.

use std::time::{Duration, Instant};

use super::{Completed, DeviceReadable, OwnedQp};
use crate::cq::{CompletionChannel, CompletionQueue};
use crate::error::{Error, Op};

/// How long [`OwnedQp::wait`] polls before it sleeps: a completion that is
/// microseconds away is taken without a system call.
const SPIN: Duration = Duration::from_micros(50);
/// The longest sleep on the channel: another thread polling the same CQ
/// may take the event (and hold this QP's completion for it), so the wait
/// polls again at least this often.
const CHANNEL_SLICE: Duration = Duration::from_millis(10);
/// The longest nap between polls of a CQ without a channel of its own.
const NAP_MAX: Duration = Duration::from_millis(1);

impl<M: DeviceReadable> OwnedQp<M> {
    /// Waits at most `timeout` for the next request of this QP to come
    /// back and hands it back, whatever its status (see
    /// [`Completed::status`]). Requests read on the way stay for the next
    /// `wait` or [`poll`](Self::poll), in order; nothing is lost on a
    /// timeout, which answers [`Error::TimedOut`] (`ETIMEDOUT`).
    ///
    /// It polls without a system call for about 50 µs. Then, when the
    /// QP's sends and receives share one CQ made with a
    /// [`CompletionChannel`] that no other CQ reports to, it arms the CQ
    /// ([`req_notify`](CompletionQueue::req_notify)) and sleeps on the
    /// channel, acknowledging the events it reads; otherwise (no channel,
    /// a shared channel, or two CQs) it sleeps in naps of at most 1 ms
    /// between polls.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use uverbs::{BufferMr, post::Local, OwnedQp, post::SendRequest, wr::WcStatus};
    /// # fn f(qp: &OwnedQp<BufferMr<Vec<u8>>>, buf: BufferMr<Vec<u8>>) -> Result<(), Box<dyn std::error::Error>> {
    /// qp.post_send(SendRequest::send(1, Local::whole(buf)))?;
    /// let done = qp.wait(Duration::from_secs(5))?;
    /// assert_eq!(done.status(), Some(WcStatus::Success));
    /// let buf = done.into_memory(); // the buffer, back from the device
    /// # Ok(()) }
    /// ```
    pub fn wait(&self, timeout: Duration) -> Result<Completed<M>, Error> {
        let start = Instant::now();
        let mut nap = Duration::from_micros(10);
        loop {
            if let Some(done) = self.next_back()? {
                return Ok(done);
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(Error::TimedOut {
                    op: Op::PollCq,
                    device: self.context().inner.device.clone(),
                    after: timeout,
                });
            }
            if waited < SPIN {
                std::hint::spin_loop();
                continue;
            }
            let left = timeout - waited;
            match self.sole_channel() {
                Some((cq, channel)) => {
                    cq.req_notify(false)?;
                    // A completion that came before the arming raises no
                    // event: look once more before sleeping.
                    if let Some(done) = self.next_back()? {
                        return Ok(done);
                    }
                    if let Some(id) = channel.wait_event(left.min(CHANNEL_SLICE))? {
                        if id == cq.event_id() {
                            cq.ack_events(1)?;
                        }
                    }
                }
                None => {
                    std::thread::sleep(nap.min(left));
                    nap = (nap * 2).min(NAP_MAX);
                }
            }
        }
    }

    /// The next request back: one a poll has not handed over yet, else the
    /// first of a new poll (the rest kept for the next call).
    fn next_back(&self) -> Result<Option<Completed<M>>, Error> {
        let mut t = self.lock();
        if t.reset.is_empty() {
            let mut read = Vec::new();
            self.poll_cqs(&mut t, &mut |key, completed| read.push((key, completed)))?;
            t.reset = read;
        }
        Ok((!t.reset.is_empty()).then(|| t.reset.remove(0).1))
    }

    /// The QP's one CQ and its channel, if the CQ has one of its own.
    fn sole_channel(&self) -> Option<(CompletionQueue, CompletionChannel)> {
        let mut cqs = self.cqs();
        let cq = cqs.next()?;
        if cqs.next().is_some() {
            return None;
        }
        let channel = cq.sole_channel()?;
        Some((cq, channel))
    }
}
