//! Lock tokens and retry jitter from one generator, reseeded after `fork`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::TOKEN_LEN;

/// A cryptographically strong generator seeded by the operating system,
/// that notices when it runs in a new process.
///
/// A `fork()` copies the generator's state into the child, so without a
/// check the child would draw the parent's next tokens, and a release by
/// one process could delete the other's lock. Every draw compares the
/// process id with the one the generator was seeded in (one `getpid`,
/// tens of nanoseconds) and reseeds from the operating system when it
/// changed.
pub(super) struct TokenSource {
    rng: StdRng,
    pid: u32,
}

impl TokenSource {
    pub(super) fn new() -> TokenSource {
        TokenSource {
            rng: StdRng::from_os_rng(),
            pid: std::process::id(),
        }
    }

    /// The generator, reseeded first if this is a new process.
    fn rng(&mut self) -> &mut StdRng {
        let pid = std::process::id();
        if pid != self.pid {
            *self = TokenSource {
                rng: StdRng::from_os_rng(),
                pid,
            };
        }
        &mut self.rng
    }

    /// A new lock token.
    pub(super) fn token(&mut self) -> [u8; TOKEN_LEN] {
        self.rng().random()
    }

    /// A number uniform in `[0, 1)`, for retry jitter.
    pub(super) fn unit(&mut self) -> f64 {
        self.rng().random()
    }
}
