//! The executors the async API is tested under, for tests that run the
//! same future under each of them. (Not in `support`: the benches and
//! examples share it and have none of these executors.)

use crate::support::executor::{BlockOn, bare_block_on};

/// Every executor the async API is tested under: tokio's current-thread
/// runtime, smol, `futures::executor`, and the bare one (no timers).
pub(crate) fn all() -> [(&'static str, BlockOn); 4] {
    [
        ("tokio current-thread", |f| {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap_or_else(|e| panic!("runtime: {e}"))
                .block_on(f);
        }),
        ("smol", |f| smol::block_on(f)),
        ("futures-executor", |f| futures_executor::block_on(f)),
        ("bare", |f| bare_block_on(f)),
    ]
}
