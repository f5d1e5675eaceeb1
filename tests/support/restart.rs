//! A master that loses its data: killed (SIGKILL), its data files deleted,
//! and started again on the same address, empty, as a master that crashed
//! without persistence (or lost its disk) comes back.

use std::panic::{self, AssertUnwindSafe};

use super::cluster::Cluster;

/// Kills node `node`, deletes its data files and starts it again, empty.
/// The harness panics if a start does not answer `PING` in time; on a
/// heavily loaded machine that has happened (the server logged it was
/// ready, probes were refused), so a start is tried up to three times.
pub fn restart_empty(cluster: &Cluster, node: usize) {
    cluster.kill(node);
    let dir = cluster.node(node).dir();
    for name in ["appendonlydir", "dump.rdb"] {
        let path = dir.join(name);
        let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
    }
    for attempt in 1..=3 {
        match panic::catch_unwind(AssertUnwindSafe(|| cluster.restart(node))) {
            Ok(()) => return,
            Err(_) if attempt < 3 => {}
            Err(e) => panic::resume_unwind(e),
        }
    }
}
