//! Steady-state heap allocations of the lock's hot paths, against five real
//! masters: acquire + release (plain and fenced) and extend must allocate
//! nothing; a contended
//! acquire that fails allocates exactly its error's boxed report. Sixteen
//! waiters of a client just built allocate nothing from their first call.
//! The RESP decoder allocates nothing per reply, whatever counts the
//! replies declare.
//!
//! The counting global allocator of this binary (`support::counting`,
//! installed in `main.rs`) counts per thread, so the other tests running
//! at once, the test harness's own threads, the set-up and the thread that
//! pauses a master never pollute the count.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::clients::one_try;
use crate::support::cluster::Cluster;
use crate::support::counting::counted;
use redlock_mio::Report;
use redlock_mio::resp::{Decoder, Status};
use redlock_mio::{Error, Redlock};

/// The heap allocations `f` makes on the current thread, and the bytes
/// they ask for.
fn allocations(f: impl FnOnce()) -> (u64, u64) {
    let ((), count, bytes) = counted(f);
    (count, bytes)
}

/// Long enough that the held lock cannot expire during a contended phase
/// slowed down by a busy machine.
const TTL: Duration = Duration::from_secs(120);
const WARM_UP: u32 = 100;
const CYCLES: u32 = 1000;
/// 17 bytes: stored inline in the `Lock` (up to 64).
const RESOURCE: &str = "alloc-test:orders";
/// The resource of the phase with a master paused, which needs every
/// other master to grant: one of its own, so that it never depends on the
/// earlier phases having left every master clean (a call succeeds on a
/// quorum, and a master it did not reach keeps a key until its TTL).
const PAUSED_RESOURCE: &str = "alloc-test:paused";

/// A client with deadlines far away: on a busy machine a round may wait
/// for a core longer than the default request timeout, and these tests
/// count allocations, not time.
fn builder(cluster: &Cluster) -> redlock_mio::Builder {
    one_try(cluster.urls(), Duration::from_secs(1)).stall_timeout(Duration::from_secs(2))
}

fn acquire_release(client: &Redlock, cluster: &Cluster) {
    acquire_release_of(client, cluster, RESOURCE);
}

fn acquire_release_of(client: &Redlock, cluster: &Cluster, resource: &str) {
    let mut lock = match client.try_lock(resource, TTL) {
        Ok(lock) => lock,
        Err(error) => panic!("acquire: {error:?}\n{}", held(client, cluster, resource)),
    };
    client.unlock(&mut lock).expect("release");
}

/// What each master holds of `resource`, and what `client` counted of
/// each: the failure's story, for a phase that should never fail.
fn held(client: &Redlock, cluster: &Cluster, resource: &str) -> String {
    let stats = client.stats();
    let mut story = String::new();
    for i in 0..cluster.len() {
        let holds = if cluster.is_paused(i) {
            "paused".to_owned()
        } else {
            let value = cluster.get(i, resource);
            let pttl = cluster.command(i, &[b"PTTL", resource.as_bytes()]);
            format!(
                "{:?}, PTTL {}",
                value.map(|v| String::from_utf8_lossy(&v).into_owned()),
                String::from_utf8_lossy(&pttl).trim()
            )
        };
        story += &format!("master {i}: {holds}; {:?}\n", stats.masters.get(i));
    }
    story
}

#[test]
fn hot_paths_do_not_allocate() {
    let cluster = Cluster::start(5);
    let holder = builder(&cluster).build().expect("build the holder");
    let other = builder(&cluster).build().expect("build the contender");

    // Acquire + release.
    for _ in 0..WARM_UP {
        acquire_release(&holder, &cluster);
    }
    let (cycle, _) = allocations(|| {
        for _ in 0..CYCLES {
            acquire_release(&holder, &cluster);
        }
    });
    println!(
        "try_lock + unlock: {cycle} allocations in {CYCLES} cycles ({:.3} per cycle)",
        cycle as f64 / f64::from(CYCLES)
    );

    // The same through `lock`, a call that waits: an acquire that would
    // queue it, a slot in the table of waits, nothing left to leave.
    let lock_release = || {
        let mut lock = holder.lock(RESOURCE, TTL).expect("acquire");
        holder.unlock(&mut lock).expect("release");
    };
    for _ in 0..WARM_UP {
        lock_release();
    }
    let (waiting_cycle, _) = allocations(|| {
        for _ in 0..CYCLES {
            lock_release();
        }
    });
    println!("lock + unlock: {waiting_cycle} allocations in {CYCLES} cycles");

    // Extend a held lock.
    let mut lock = holder.try_lock(RESOURCE, TTL).expect("acquire to extend");
    for _ in 0..WARM_UP {
        holder.extend(&mut lock, TTL).expect("extend");
    }
    let (extend, _) = allocations(|| {
        for _ in 0..CYCLES {
            holder.extend(&mut lock, TTL).expect("extend");
        }
    });
    println!(
        "extend: {extend} allocations in {CYCLES} calls ({:.3} per call)",
        extend as f64 / f64::from(CYCLES)
    );

    // A contended acquire, while `holder` still holds the lock.
    let contend = || match other.try_lock(RESOURCE, TTL) {
        Err(Error::Contended(_)) => {}
        Err(error) => panic!("expected Contended, got {error}"),
        Ok(_) => panic!("the contender won a held lock"),
    };
    for _ in 0..WARM_UP {
        contend();
    }
    let (contended, contended_bytes) = allocations(|| {
        for _ in 0..CYCLES {
            contend();
        }
    });
    println!(
        "contended try_lock (fails): {contended} allocations ({contended_bytes} bytes) \
         in {CYCLES} attempts ({:.3} per attempt; size_of::<Report>() = {})",
        contended as f64 / f64::from(CYCLES),
        size_of::<Report>()
    );
    holder.unlock(&mut lock).expect("final release");

    // A fenced acquire (acquire, raise) + release.
    let fenced = builder(&cluster)
        .fencing(TTL)
        .build()
        .expect("build the fenced client");
    for _ in 0..WARM_UP {
        acquire_release(&fenced, &cluster);
    }
    let (fenced_cycle, _) = allocations(|| {
        for _ in 0..CYCLES {
            acquire_release(&fenced, &cluster);
        }
    });
    println!("fenced try_lock + unlock: {fenced_cycle} allocations in {CYCLES} cycles");

    assert_eq!(cycle, 0, "try_lock + unlock allocated");
    assert_eq!(waiting_cycle, 0, "lock + unlock allocated");
    assert_eq!(fenced_cycle, 0, "fenced try_lock + unlock allocated");
    assert_eq!(extend, 0, "extend allocated");
    // Exactly one per failed attempt, of exactly `size_of::<Report>()`
    // bytes: the `Box<Report>` inside `Error::Contended` (made by
    // `Redlock::report` in src/client.rs, for errors only). The round, the
    // per-node states (an inline `SmallVec` for up to 8 nodes) and the
    // release-everywhere `EVAL` sent after the failure allocate nothing.
    assert_eq!(
        (contended, contended_bytes),
        (
            u64::from(CYCLES),
            u64::from(CYCLES) * size_of::<Report>() as u64
        ),
        "a failed acquire should allocate exactly its boxed report"
    );

    // A master that stops answering in the middle of the steady state: its
    // connection collects requests up to the stall limit, is dropped and
    // reconnected, and none of that allocates. It is paused from another
    // thread (allocations are counted on this one only), a few cycles into
    // the measurement, after a warm-up with every master healthy.
    let mut held = holder
        .try_lock("alloc-test:held", TTL)
        .expect("acquire the lock to extend");
    for _ in 0..WARM_UP {
        acquire_release_of(&holder, &cluster, PAUSED_RESOURCE);
        holder.extend(&mut held, TTL).expect("extend");
    }
    // A quarter into the run, the measured thread asks for the pause and
    // spins (atomics and yields allocate nothing) until it is done.
    let (asked, done) = (AtomicBool::new(false), AtomicBool::new(false));
    let before = holder.stats().masters[4].errors;
    let (paused, _) = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !asked.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            cluster.pause(4);
            done.store(true, Ordering::SeqCst);
        });
        allocations(|| {
            for cycle in 0..CYCLES {
                if cycle == CYCLES / 4 {
                    asked.store(true, Ordering::SeqCst);
                    while !done.load(Ordering::SeqCst) {
                        std::thread::yield_now();
                    }
                }
                acquire_release_of(&holder, &cluster, PAUSED_RESOURCE);
                holder
                    .extend(&mut held, TTL)
                    .expect("extend with a master paused");
            }
        })
    });
    cluster.resume(4);
    let stats = holder.stats();
    assert!(
        stats.masters[4].errors > before,
        "rounds ran with the master paused (it fails them): {stats:?}"
    );
    println!("a master paused mid-run: {paused} allocations in {CYCLES} cycles and extends");
    assert_eq!(paused, 0, "a paused master made the client allocate");

    decoder_allocates_nothing();
}

/// 64 threads share one client, each cycling (acquire + release) on its own
/// resource, their rounds in flight at once over the same connections:
/// after a warm-up none of them allocates, whether it polls for the others
/// or waits to be woken.
#[test]
fn sixty_four_callers_of_one_client_do_not_allocate() {
    const CALLERS: usize = 64;
    const EACH: u32 = 200;
    let cluster = Cluster::start(5);
    let client = builder(&cluster).build().expect("build the shared client");
    let start = std::sync::Barrier::new(CALLERS);
    let counts: Vec<u64> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..CALLERS)
            .map(|t| {
                let (client, start) = (&client, &start);
                scope.spawn(move || {
                    let resource = format!("alloc-test:caller:{t}");
                    let cycle = || {
                        let mut lock = client.try_lock(&resource, TTL).expect("acquire");
                        client.unlock(&mut lock).expect("release");
                    };
                    for _ in 0..WARM_UP {
                        cycle();
                    }
                    // Every caller warmed up: the steady state starts
                    // with all of them in it.
                    start.wait();
                    allocations(|| {
                        for _ in 0..EACH {
                            cycle();
                        }
                    })
                    .0
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a caller panicked"))
            .collect()
    });
    let total: u64 = counts.iter().sum();
    let cycles = CALLERS as u64 * u64::from(EACH);
    println!(
        "{CALLERS} callers of one client: {total} allocations in {cycles} cycles ({:.4} per cycle)",
        total as f64 / cycles as f64
    );
    assert_eq!(total, 0, "allocations per caller: {counts:?}");
}

/// Decodes a stream of every reply type, nested aggregates with large
/// declared counts among them, with one decoder made beforehand.
fn decoder_allocates_nothing() {
    let mut stream = Vec::new();
    for reply in [
        &b"+OK\r\n$-1\r\n_\r\n:1\r\n-NOSCRIPT No matching script\r\n"[..],
        b"$40\r\n0123456789012345678901234567890123456789\r\n",
        b"%2\r\n+a\r\n*3\r\n:1\r\n,1.5\r\n#t\r\n+b\r\n~1\r\n(123\r\n",
        b"|1\r\n+ttl\r\n:3\r\n>2\r\n$7\r\nmessage\r\n=8\r\ntxt:text\r\n",
        b"$?\r\n;2\r\nab\r\n;0\r\n*?\r\n:1\r\n.\r\n!3\r\nERR\r\n",
    ] {
        stream.extend_from_slice(reply);
    }
    // A deep nest, within the default depth limit.
    stream.extend(b"*1\r\n".repeat(100));
    stream.extend_from_slice(b":0\r\n");
    // A declared count of 4 billion, then fed a single element: nothing is
    // reserved from the count.
    stream.extend_from_slice(b"*4000000000\r\n:1\r\n");
    let mut decoder = Decoder::new();
    let mut tokens = 0u32;
    let (count, bytes) = allocations(|| {
        for _ in 0..100 {
            decoder.reset();
            let mut rest = &stream[..];
            while let Ok(Status::Complete(item)) = decoder.decode(rest) {
                rest = &rest[item.len..];
                tokens += 1;
            }
            assert!(rest.is_empty(), "the whole stream decodes");
        }
    });
    println!("decoder: {count} allocations ({bytes} bytes) for {tokens} tokens");
    assert!(tokens > 100 * 120, "decoded {tokens} tokens");
    assert_eq!(count, 0, "the decoder allocated");
}

/// Two clients take one resource in turn, each waiting for the other's
/// release (queued, told, handed the lock): after a warm-up, a wait
/// allocates nothing, its refusals' reports included.
#[test]
fn a_wait_that_is_handed_the_lock_does_not_allocate() {
    const EACH: u32 = 300;
    let cluster = Cluster::start(5);
    let clients = [
        builder(&cluster).build().expect("build the first"),
        builder(&cluster).build().expect("build the second"),
    ];
    let far = || std::time::Instant::now() + Duration::from_secs(60);
    let counts: Vec<(u64, u64)> = std::thread::scope(|scope| {
        let threads: Vec<_> = clients
            .iter()
            .map(|client| {
                scope.spawn(move || {
                    let cycle = || {
                        let mut lock = client.lock_until(RESOURCE, TTL, far()).expect("acquire");
                        client.unlock(&mut lock).expect("release");
                    };
                    for _ in 0..WARM_UP {
                        cycle();
                    }
                    let contended = client.stats().contended;
                    let (count, _) = allocations(|| {
                        for _ in 0..EACH {
                            cycle();
                        }
                    });
                    (count, client.stats().contended - contended)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a caller panicked"))
            .collect()
    });
    println!("two waiters taking turns: (allocations, refused attempts) {counts:?}");
    assert!(
        counts.iter().any(|&(_, refused)| refused > 0),
        "nobody waited: {counts:?}"
    );
    for (count, _) in counts {
        assert_eq!(count, 0, "a wait allocated");
    }
}

/// Sixteen callers of a client just built wait at once for a lock held
/// elsewhere, each attempt refused until its deadline: none of them
/// allocates, from its first call, its refusals' reports included (the
/// client made the boxes for sixteen of them at build).
#[test]
fn sixteen_waiters_of_a_new_client_do_not_allocate_from_the_first_call() {
    const WAITERS: usize = 16;
    let cluster = Cluster::start(5);
    let holder = builder(&cluster).build().expect("build the holder");
    let _held = holder.try_lock(RESOURCE, TTL).expect("acquire");
    let client = builder(&cluster)
        .retry_delay(Duration::from_millis(20))
        .build()
        .expect("build the waiters' client");
    let start = std::sync::Barrier::new(WAITERS);
    let counts: Vec<(u64, bool)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..WAITERS)
            .map(|_| {
                let (client, start) = (&client, &start);
                scope.spawn(move || {
                    start.wait();
                    let mut result = None;
                    let (count, _) = allocations(|| {
                        let deadline = std::time::Instant::now() + Duration::from_millis(300);
                        result = Some(client.lock_until(RESOURCE, TTL, deadline));
                    });
                    let refused = matches!(result, Some(Err(Error::Contended(_))));
                    (count, refused)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a waiter panicked"))
            .collect()
    });
    println!("{WAITERS} waiters of a new client: (allocations, refused) {counts:?}");
    for (count, refused) in counts {
        assert!(refused, "the lock is held elsewhere");
        assert_eq!(count, 0, "a waiter allocated");
    }
}
