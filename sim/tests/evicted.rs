//! Why the crate asks for `maxmemory-policy noeviction`
//! (`redlock_mio::operations`): a `volatile-*` policy spares the crate's
//! own keys, which have no TTL, but evicts the locks' keys, which have one,
//! and a lock whose keys a quorum evicted is granted to a second holder
//! within the first one's validity.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly"
)]

mod rig;

use std::time::Duration;

use redlock_mio_sim::Eviction;
use redlock_mio_sim::client::Names;

use rig::Rig;

#[test]
fn a_volatile_policy_evicts_a_held_lock_and_lets_a_second_holder_in() {
    let mut rig = Rig::new(3);
    let names = Names::one(b"res").unwrap();
    let ttl = Duration::from_secs(1);
    let acquire = |rig: &mut Rig, token: &[u8; 20]| {
        let now = rig.instant();
        let id = rig
            .client
            .begin_acquire(&names, token, ttl, None, None, now)
            .unwrap();
        rig.exchange_all();
        let now = rig.instant();
        rig.client.end_acquire(id, &names, token, now)
    };
    let first = acquire(&mut rig, &[1; 20]).expect("free");
    assert!(acquire(&mut rig, &[2; 20]).is_err(), "held");
    // Two masters short of memory: the lock's key is the only one with
    // an expiry there.
    for i in 0..2 {
        let now_us = rig.now_us(i);
        let evicted = rig.masters[i].evict(0, Eviction::Volatile, 0, now_us);
        assert_eq!(evicted.as_deref(), Some(&b"res"[..]));
    }
    let second = acquire(&mut rig, &[3; 20]).expect("granted again");
    assert!(
        first.valid_until() > rig.instant(),
        "within the first's validity"
    );
    assert!(second.valid_until() > rig.instant());
}
