//! A model's answer on its way from the provider to the agent: the body the door's
//! server writes, which reads the provider's body as it goes (on the same task, see
//! [`super::provider`]), meters its usage, and reports the request when the answer
//! ends, fails, or the agent hangs up (whatever the agent was sent is what it used).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::body::{Body, Frame};

use super::model::{Ledger, Report, report};
use super::provider::{ProviderBody, ProviderError};
use super::segments::Segments;
use super::{RunDoor, Shared};
use crate::model::usage::Meter;

/// What the request's report needs besides the usage.
pub struct Reporting {
    pub shared: Arc<Shared>,
    pub door: Arc<RunDoor>,
    pub ledger: Arc<Ledger>,
    pub provider: String,
    pub status: u16,
    pub streamed: bool,
    pub arrived: Instant,
}

pub struct Answer {
    upstream: ProviderBody,
    /// Until the request has been reported.
    meter: Option<Meter>,
    /// The provider's end (`None`) or error, met while a frame was being filled: given
    /// next.
    after: Option<Option<ProviderError>>,
    first_byte: Option<Duration>,
    /// Until the request has been reported.
    reporting: Option<Reporting>,
}

impl Answer {
    pub fn new(upstream: ProviderBody, meter: Meter, reporting: Reporting) -> Answer {
        Answer { upstream, meter: Some(meter), after: None, first_byte: None, reporting: Some(reporting) }
    }

    fn finish(&mut self) {
        let Some(r) = self.reporting.take() else { return };
        let usage = self.meter.take().map(Meter::finish).unwrap_or_default();
        let first_byte = self.first_byte.unwrap_or_else(|| r.arrived.elapsed());
        report(
            &r.shared,
            &r.door,
            Report {
                provider: r.provider,
                status: r.status,
                usage,
                streamed: r.streamed,
                first_byte,
                took: r.arrived.elapsed(),
                refused: None,
            },
            &r.ledger,
        );
    }

    /// The provider's end, or its error, as the agent gets it.
    fn end(&mut self, error: Option<ProviderError>) -> Poll<Option<Result<Frame<Segments>, std::io::Error>>> {
        self.finish();
        match error {
            None => Poll::Ready(None),
            Some(e) => {
                tracing::warn!(error = %e, "a provider's answer broke off");
                Poll::Ready(Some(Err(std::io::Error::other(e.to_string()))))
            }
        }
    }

    fn feed(&mut self, data: &[u8]) {
        if let Some(meter) = &mut self.meter {
            meter.feed(data);
        }
    }
}

impl Body for Answer {
    type Data = Segments;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Segments>, std::io::Error>>> {
        let this = &mut *self;
        if let Some(end) = this.after.take() {
            return this.end(end);
        }
        loop {
            let data = match Pin::new(&mut this.upstream).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) if !data.is_empty() => data,
                    // Empty data, or trailers: nothing to write.
                    _ => continue,
                },
                Poll::Ready(None) => return this.end(None),
                Poll::Ready(Some(Err(e))) => return this.end(Some(e)),
            };
            if this.first_byte.is_none() {
                this.first_byte = this.reporting.as_ref().map(|r| r.arrived.elapsed());
            }
            this.feed(&data);
            // What has already come joins the frame, so that a fast answer is written
            // in large pieces; an event that comes alone still goes at once.
            let mut frame = Segments::from(data);
            while frame.has_room() {
                match Pin::new(&mut this.upstream).poll_frame(cx) {
                    Poll::Pending => break,
                    Poll::Ready(Some(Ok(more))) => {
                        if let Ok(more) = more.into_data() {
                            this.feed(&more);
                            frame.push(more);
                        }
                    }
                    Poll::Ready(None) => {
                        this.after = Some(None);
                        break;
                    }
                    Poll::Ready(Some(Err(e))) => {
                        this.after = Some(Some(e));
                        break;
                    }
                }
            }
            return Poll::Ready(Some(Ok(Frame::data(frame))));
        }
    }
}

impl Drop for Answer {
    /// The agent hung up, or the door stopped: the request is reported with what was
    /// read.
    fn drop(&mut self) {
        self.finish();
    }
}
