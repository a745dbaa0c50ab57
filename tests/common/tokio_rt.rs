//! The async tests' runtime and their bound on every await.

use std::future::Future;
use std::time::Duration;

/// A two-worker runtime with timers and I/O.
pub fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// `fut` within `limit`, or the test fails naming `what`.
pub async fn within<T>(limit: Duration, what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {limit:?}"))
}
