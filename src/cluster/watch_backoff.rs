//! The backoff of every watch: 800 ms doubling to 10 s, with jitter (up to
//! twice that), reset by any event; and none after 410 Gone.
//!
//! kube's default (and client-go's) caps at 30 s, and its jitter doubles
//! that: after an API server outage a store could stay stale for a minute
//! while admissions are answered from it. gavel runs a few watches per
//! replica, not one per node, so retrying at most every 10-20 s costs the
//! API server nothing it would notice, and each request still takes a token
//! from the client's QPS bucket.
//!
//! A 410 is the API server saying the watch's resourceVersion is older
//! than what it still has (etcd compacted it, or the API server restarted
//! with a new watch cache); kube's watcher then lists again, and that list
//! is what brings back the updates the store missed. With the plain
//! backoff, a watcher reconnecting after an outage first waits out its
//! grown delay to meet the 410, then waits again before the list: up to a
//! minute of stale policy context. Here the list follows at once.

use futures_util::{Stream, StreamExt};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::utils::{Backoff, StreamBackoff};
use kube::runtime::watcher::{self, ExponentialBackoff};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The longest delay before jitter.
const MAX_DELAY: Duration = Duration::from_secs(10);

/// `stream` with the backoff above.
pub fn relist_at_once<S, T>(stream: S) -> impl Stream<Item = Result<T, watcher::Error>> + Send
where
    S: Stream<Item = Result<T, watcher::Error>> + Send,
{
    let expired = Arc::new(AtomicBool::new(false));
    let seen = expired.clone();
    let stream = stream.inspect(move |item| {
        if let Err(e) = item
            && is_gone(e)
        {
            seen.store(true, Ordering::Relaxed);
        }
    });
    StreamBackoff::new(
        stream,
        ExpiryBackoff {
            inner: ResetTimerBackoff::new(
                backon::ExponentialBuilder::default()
                    .with_min_delay(Duration::from_millis(800))
                    .with_max_delay(MAX_DELAY)
                    .with_factor(2.0)
                    .with_jitter()
                    .without_max_times()
                    .into(),
                Duration::from_secs(120),
            ),
            expired,
        },
    )
}

fn is_gone(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// The error just seen (the stream reports it before asking for a delay)
/// decides: no delay after a 410, the exponential one otherwise.
struct ExpiryBackoff {
    inner: ResetTimerBackoff<ExponentialBackoff>,
    expired: Arc<AtomicBool>,
}

impl Iterator for ExpiryBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.expired.swap(false, Ordering::Relaxed) {
            self.inner.reset();
            return Some(Duration::ZERO);
        }
        self.inner.next()
    }
}

impl Backoff for ExpiryBackoff {
    fn reset(&mut self) {
        self.inner.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn gone() -> watcher::Error {
        let mut status = Status::failure("too old resource version: 1 (2)", "Expired");
        status.code = 410;
        watcher::Error::WatchError(Box::new(status))
    }

    fn refused() -> watcher::Error {
        watcher::Error::NoResourceVersion
    }

    /// After other errors the delay grows; a 410 is followed at once and
    /// starts the growth over.
    #[tokio::test(start_paused = true)]
    async fn a_410_is_followed_at_once() {
        let items: Vec<Result<u32, watcher::Error>> = vec![
            Err(refused()),
            Err(refused()),
            Err(refused()),
            Err(gone()),
            Ok(1),
        ];
        let mut stream = std::pin::pin!(relist_at_once(futures_util::stream::iter(items)));
        let mut gaps = Vec::new();
        let mut last = tokio::time::Instant::now();
        while let Some(item) = stream.next().await {
            let now = tokio::time::Instant::now();
            gaps.push((item.is_ok(), now - last));
            last = now;
        }
        // The first item comes at once; each error delays the next item.
        assert_eq!(gaps[0].1, Duration::ZERO);
        assert!(gaps[1].1 > Duration::ZERO && gaps[2].1 > gaps[1].1 / 2);
        assert!(gaps[3].1 >= Duration::from_millis(1000), "{gaps:?}");
        // The item after the 410 (the list's result) is not delayed.
        assert_eq!(gaps[4], (true, Duration::ZERO));
    }

    /// However long the API server is away, retries stay at most twice the
    /// cap apart (jitter included).
    #[tokio::test(start_paused = true)]
    async fn retries_stay_within_twice_the_cap() {
        let items = (0..30).map(|_| Err::<u32, _>(refused()));
        let mut stream = std::pin::pin!(relist_at_once(futures_util::stream::iter(items)));
        let mut last = tokio::time::Instant::now();
        let mut longest = Duration::ZERO;
        while stream.next().await.is_some() {
            longest = longest.max(last.elapsed());
            last = tokio::time::Instant::now();
        }
        assert!(longest >= MAX_DELAY, "{longest:?}");
        assert!(longest <= 2 * MAX_DELAY, "{longest:?}");
    }
}
