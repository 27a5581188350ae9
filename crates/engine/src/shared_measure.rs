//! One measure shared by the callers that asked for it together: a caller takes the
//! result of a measure that began after it asked (as fresh as one it would make), and
//! makes one otherwise. Twenty creates arriving at once measure the disk twice, not
//! twenty times (each measure stats every sandbox's disk image), and no caller ever
//! gets a measure older than its own request. A caller under the engine's `admission`
//! may wait for a measure under way before making its own (at most two measures' time).
//! The clock is the real one (`std`): under tokio's paused test clock every measure
//! would look begun after every request.

use std::future::Future;
use std::time::Instant;
use tokio::sync::Mutex;

/// The last measure and when it began.
#[derive(Debug)]
pub(crate) struct SharedMeasure<T> {
    last: Mutex<Option<(Instant, T)>>,
}

impl<T> Default for SharedMeasure<T> {
    fn default() -> Self {
        Self {
            last: Mutex::new(None),
        }
    }
}

impl<T: Clone> SharedMeasure<T> {
    /// The result of a measure begun since this call, `measure`'s if none is: measures
    /// run one at a time, and one that fails is not shared (the next caller measures).
    pub async fn get<E, F>(&self, measure: F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        let asked = Instant::now();
        let mut last = self.last.lock().await;
        if let Some((began, value)) = last.as_ref() {
            if *began >= asked {
                return Ok(value.clone());
            }
        }
        let began = Instant::now();
        let value = measure.await?;
        *last = Some((began, value.clone()));
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// A measure that counts itself and takes a while, giving its ordinal.
    async fn counted(count: &AtomicUsize) -> Result<usize, ()> {
        let n = count.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(n)
    }

    #[tokio::test]
    async fn callers_that_ask_together_share_at_most_two_measures() {
        let shared = Arc::new(SharedMeasure::<usize>::default());
        let count = Arc::new(AtomicUsize::new(0));
        let calls = (0..20).map(|_| {
            let (shared, count) = (shared.clone(), count.clone());
            tokio::spawn(async move { shared.get(counted(&count)).await })
        });
        let got: Vec<usize> = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .map(|r| r.expect("task").expect("measure"))
            .collect();
        assert_eq!(got.len(), 20);
        assert!(
            count.load(Ordering::SeqCst) <= 2,
            "{} measures for 20 callers",
            count.load(Ordering::SeqCst)
        );
    }

    #[tokio::test]
    async fn a_caller_after_a_measure_ended_measures_anew() {
        let shared = SharedMeasure::<usize>::default();
        let count = AtomicUsize::new(0);
        assert_eq!(shared.get(counted(&count)).await, Ok(1));
        assert_eq!(shared.get(counted(&count)).await, Ok(2));
        assert_eq!(shared.get(counted(&count)).await, Ok(3));
    }

    #[tokio::test]
    async fn a_failed_measure_is_not_shared() {
        let shared = Arc::new(SharedMeasure::<usize>::default());
        let failing = shared.get(async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Err::<usize, &str>("no disk")
        });
        let waiting = {
            let shared = shared.clone();
            async move {
                // Asks while the failing measure is under way.
                tokio::time::sleep(Duration::from_millis(5)).await;
                shared.get(async { Ok::<usize, &str>(7) }).await
            }
        };
        let (failed, after) = tokio::join!(failing, waiting);
        assert_eq!(failed, Err("no disk"));
        assert_eq!(after, Ok(7));
    }
}
