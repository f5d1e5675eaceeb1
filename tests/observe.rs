//! The optional observability features against real masters: a `tracing`
//! span per round with its outcome (feature `tracing`), and round metrics
//! through the `metrics` facade (feature `metrics`). Run by `.ci/test`
//! with `--features tracing,metrics`; without them this file is empty.
//!
//! Its own test binary, not a module of `tests/it`: `tracing` caches per
//! call site, for the whole process, whether a span is wanted, and the
//! rounds of every other test (made with no subscriber) would race the
//! traced test's subscriber as the metrics test does (see
//! [`ONE_AT_A_TIME`]), leaving its spans unrecorded now and then.

#![cfg(any(feature = "tracing", feature = "metrics"))]
#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

mod support;

use std::time::Duration;

use redlock_mio::{Error, Redlock};
use support::clients::client;
use support::cluster::Cluster;

const TTL: Duration = Duration::from_secs(10);
const RESOURCE: &str = "secret-resource-name";
const REQUEST_TIMEOUT: Duration = Duration::from_millis(100);

/// Taken by each test for its whole run. Under `cargo test` both tests run
/// on threads of one process, and `tracing` caches per call site whether a
/// span is wanted: spans first met by the metrics test (no subscriber)
/// while the traced test set its subscriber up were now and then left
/// unrecorded (no span at all, in about one run of six).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Two acquire rounds that win, one contended, and a killed master.
fn workload(cluster: &Cluster, redlock: &Redlock) {
    for _ in 0..2 {
        let mut lock = redlock.try_lock(RESOURCE, TTL).expect("acquire");
        redlock.unlock(&mut lock).expect("release");
    }
    let other = client(cluster.urls(), REQUEST_TIMEOUT);
    let mut held = other.try_lock(RESOURCE, TTL).expect("the other holds");
    let err = redlock.try_lock(RESOURCE, TTL).expect_err("held");
    assert!(matches!(err, Error::Contended(_)), "{err}");
    other.unlock(&mut held).expect("release");
    cluster.kill(2);
    let mut lock = redlock.try_lock(RESOURCE, TTL).expect("two of three");
    redlock.unlock(&mut lock).expect("release");
}

#[cfg(feature = "tracing")]
mod traced {
    use std::fmt::Debug;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, PoisonError};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    use super::{REQUEST_TIMEOUT, RESOURCE, client, workload};
    use crate::support::cluster::Cluster;

    /// A span or an event: its name (an event's message) and its fields.
    #[derive(Debug, Default, Clone)]
    struct Seen {
        name: String,
        fields: Vec<(String, String)>,
    }

    impl Seen {
        fn get(&self, field: &str) -> Option<&str> {
            self.fields
                .iter()
                .rev()
                .find(|(name, _)| name == field)
                .map(|(_, value)| value.as_str())
        }
    }

    impl Visit for Seen {
        fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
            self.fields
                .push((field.name().to_owned(), format!("{value:?}")));
        }

        fn record_str(&mut self, field: &Field, value: &str) {
            self.fields
                .push((field.name().to_owned(), value.to_owned()));
        }
    }

    #[derive(Default)]
    struct Capture {
        next: AtomicU64,
        spans: Mutex<Vec<Seen>>,
        events: Mutex<Vec<Seen>>,
    }

    struct Handle(Arc<Capture>);

    impl Subscriber for Handle {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }

        fn new_span(&self, attrs: &Attributes<'_>) -> Id {
            let mut seen = Seen {
                name: attrs.metadata().name().to_owned(),
                ..Seen::default()
            };
            attrs.record(&mut seen);
            let mut spans = self.0.spans.lock().unwrap_or_else(PoisonError::into_inner);
            spans.push(seen);
            self.0.next.fetch_add(1, Ordering::Relaxed);
            Id::from_u64(spans.len() as u64)
        }

        fn record(&self, id: &Id, values: &Record<'_>) {
            let mut spans = self.0.spans.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(seen) = spans.get_mut(id.into_u64() as usize - 1) {
                values.record(seen);
            }
        }

        fn record_follows_from(&self, _: &Id, _: &Id) {}

        fn event(&self, event: &Event<'_>) {
            let mut seen = Seen::default();
            event.record(&mut seen);
            seen.name = seen.get("message").unwrap_or("").to_owned();
            self.0
                .events
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(seen);
        }

        fn enter(&self, _: &Id) {}

        fn exit(&self, _: &Id) {}
    }

    #[test]
    fn a_span_per_round_with_its_outcome() {
        let _serial = super::one_at_a_time();
        let cluster = Cluster::start(3);
        let capture = Arc::new(Capture::default());
        tracing::subscriber::with_default(Handle(Arc::clone(&capture)), || {
            let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
            workload(&cluster, &redlock);
        });
        let spans = capture.spans.lock().unwrap_or_else(PoisonError::into_inner);
        let rounds: Vec<&Seen> = spans.iter().filter(|s| s.name == "redlock.round").collect();
        let outcomes: Vec<(&str, &str)> = rounds
            .iter()
            .map(|s| (s.get("op").unwrap_or("?"), s.get("outcome").unwrap_or("?")))
            .collect();
        // Our client's rounds and the other client's, in order.
        assert!(
            outcomes.starts_with(&[
                ("acquire", "acquired"),
                ("release", "released"),
                ("acquire", "acquired"),
                ("release", "released"),
                ("acquire", "acquired"),
                ("acquire", "contended"),
            ]),
            "{outcomes:?}"
        );
        let contended = rounds[5];
        assert_eq!(contended.get("resource_len"), Some("20"));
        assert!(contended.get("elapsed_us").is_some(), "{contended:?}");
        assert!(
            contended.get("masters").is_some_and(|m| m
                .split(',')
                .filter(|s| *s == "refused")
                .count()
                >= 2),
            "{contended:?}"
        );
        let last = rounds.last().expect("rounds");
        assert!(
            last.get("masters").is_some_and(|m| m.contains("failed")),
            "the killed master failed: {last:?}"
        );
        let everything = format!("{spans:?} {:?}", capture.events);
        assert!(
            !everything.contains(RESOURCE),
            "resource names stay out of traces"
        );
        let events = capture
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        assert!(
            events.iter().any(|e| e.name == "connecting"),
            "connects are events: {events:?}"
        );
        assert!(
            events
                .iter()
                .any(|e| e.name == "connection dropped" && e.get("master").is_some()),
            "the killed master's connection drop is an event: {events:?}"
        );
    }
}

#[cfg(feature = "metrics")]
mod measured {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex, PoisonError};

    use metrics::{
        Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString,
        Unit,
    };

    use super::{REQUEST_TIMEOUT, client, workload};
    use crate::support::cluster::Cluster;

    #[derive(Default)]
    struct Values(Mutex<Vec<f64>>);

    impl HistogramFn for Values {
        fn record(&self, value: f64) {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(value);
        }
    }

    /// Keeps every metric, by name and labels.
    #[derive(Default)]
    struct Keep {
        counters: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
        gauges: Mutex<BTreeMap<String, Arc<AtomicU64>>>,
        histograms: Mutex<BTreeMap<String, Arc<Values>>>,
    }

    fn name(key: &Key) -> String {
        let labels: Vec<String> = key
            .labels()
            .map(|l| format!("{}={}", l.key(), l.value()))
            .collect();
        format!("{}{{{}}}", key.name(), labels.join(","))
    }

    fn entry<T: Default>(map: &Mutex<BTreeMap<String, Arc<T>>>, key: &Key) -> Arc<T> {
        let mut map = map.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(map.entry(name(key)).or_default())
    }

    impl Recorder for Keep {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(entry(&self.counters, key))
        }

        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(entry(&self.gauges, key))
        }

        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(entry(&self.histograms, key))
        }
    }

    #[test]
    fn rounds_are_measured() {
        let _serial = super::one_at_a_time();
        let cluster = Cluster::start(3);
        let keep = Keep::default();
        metrics::with_local_recorder(&keep, || {
            let redlock = client(cluster.urls(), REQUEST_TIMEOUT);
            workload(&cluster, &redlock);
        });
        let counters = keep.counters.lock().unwrap_or_else(PoisonError::into_inner);
        let count = |key: &str| counters.get(key).map_or(0, |c| c.load(Ordering::Relaxed));
        // Ours and the other client's: 4 + 1 acquired, 1 contended.
        assert_eq!(
            count("redlock_attempts_total{outcome=acquired}"),
            4,
            "{counters:?}"
        );
        assert_eq!(
            count("redlock_attempts_total{outcome=contended}"),
            1,
            "{counters:?}"
        );
        let killed = format!(
            "redlock_master_errors_total{{master={}}}",
            cluster.urls()[2]
        );
        assert!(count(&killed) >= 1, "{counters:?}");
        let connects: u64 = counters
            .iter()
            .filter(|(k, _)| k.starts_with("redlock_connects_total{"))
            .map(|(_, c)| c.load(Ordering::Relaxed))
            .sum();
        assert!(connects >= 6, "two clients, three masters: {counters:?}");
        assert!(
            counters.keys().all(|k| !k.contains("secret-resource-name")),
            "no per-resource labels"
        );
        let histograms = keep
            .histograms
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let acquired = histograms
            .get("redlock_acquire_seconds{outcome=acquired}")
            .expect("acquire latency");
        let values = acquired.0.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(values.len(), 4);
        assert!(values.iter().all(|v| *v > 0.0 && *v < 1.0), "{values:?}");
        let gauges = keep.gauges.lock().unwrap_or_else(PoisonError::into_inner);
        let in_flight = gauges.get("redlock_rounds_in_flight{}").expect("gauge");
        assert_eq!(
            f64::from_bits(in_flight.load(Ordering::Relaxed)),
            0.0,
            "all rounds over"
        );
    }
}
