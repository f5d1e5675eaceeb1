//! What ties the model to the library: tests that run the library's own
//! code beside the model's transcription of it, on the same inputs, and
//! compare what they do.
//!
//! - [`client`]: the library's fenced acquire machine (`FencedAcquire`
//!   and `FenceBook` of `src/client/fence.rs`, driven through
//!   `machine::FenceMachine`, with the rounds of `sim::Round`) and the
//!   model's client ([`crate::client`]) take the same sequences of round
//!   outcomes and must decide the same thing at every step.
//! - [`scripts`]: the library's Lua fence scripts, run on a real
//!   `redis-server`, and the model's scripts ([`crate::scripts`]) run the
//!   same requests on the same master states and must give the same
//!   replies and leave the same keys.

mod client;
mod machine;
mod scripts;

/// A small deterministic generator (SplitMix64): the cases are the same on
/// every run, so a failure names its seed and case.
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// One of `items`, with the weights given beside each.
    pub(crate) fn pick<T: Copy>(&mut self, items: &[(u32, T)]) -> T {
        let total: u32 = items.iter().map(|(w, _)| w).sum();
        let mut at = (self.next() % u64::from(total)) as u32;
        for &(weight, item) in items {
            if at < weight {
                return item;
            }
            at -= weight;
        }
        items[items.len() - 1].1
    }
}

/// The arguments of one RESP command (an array of bulk strings), as the
/// library's driver writes it.
pub(crate) fn resp_args(bytes: &[u8]) -> Vec<Vec<u8>> {
    let line = |at: usize| -> (usize, usize) {
        let end = (at..bytes.len())
            .find(|&i| bytes[i..].starts_with(b"\r\n"))
            .unwrap_or(bytes.len());
        let n = std::str::from_utf8(&bytes[at + 1..end])
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        (n, end + 2)
    };
    let (count, mut at) = line(0);
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let (len, start) = line(at);
        args.push(bytes[start..start + len].to_vec());
        at = start + len + 2;
    }
    args
}
