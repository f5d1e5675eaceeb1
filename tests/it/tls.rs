//! `rediss://` (feature `tls`) against real `redis-server`s started with
//! `--tls-port` and certificates this test makes (a private CA, server and
//! client certificates). Each node also keeps its plain port, for the
//! harness's own checks.

use std::fs;
use std::sync::Arc;
use std::time::Duration;

use crate::support::check::eventually;
use crate::support::pki::{Issued, Pki};
use redlock_mio::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use redlock_mio::rustls::{ClientConfig, RootCertStore};
use redlock_mio::{ConfigError, Error, Redlock, Require};
use redlock_mio::{NodeError, NodeState};

const TTL: Duration = Duration::from_secs(10);

/// A client configuration that trusts `pki`, with `client` as its
/// certificate if given.
fn client_config(pki: &Pki, client: Option<&Issued>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from(pki.ca_der()))
        .expect("CA root");
    let builder = ClientConfig::builder_with_provider(Arc::new(
        redlock_mio::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots);
    let config = match client {
        None => builder.with_no_client_auth(),
        Some(issued) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from(issued.cert_der())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(issued.key_der())),
            )
            .expect("client certificate"),
    };
    Arc::new(config)
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("redlock-mio-tls-{name}-{}", std::process::id()));
    fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn locks_over_tls() {
    let dir = temp_dir("cycle");
    let pki = Pki::new("redlock-mio test CA");
    let server = pki.issue(&["localhost"], false);
    let (clusters, urls) = pki.tls_nodes(&dir, &server, 3, false);
    let redlock = Redlock::builder(&urls)
        .tls_config(client_config(&pki, None))
        .require_handshakes(Require::All)
        .build()
        .expect("every TLS handshake completes");
    let mut lock = redlock.try_lock("tls:r", TTL).expect("lock");
    for cluster in &clusters {
        assert_eq!(
            cluster.get(0, "tls:r").as_deref(),
            Some(&lock.token()[..]),
            "the key, seen through the plain port"
        );
    }
    redlock.extend(&mut lock, TTL).expect("extend");
    redlock.unlock(&mut lock).expect("unlock");
    for cluster in &clusters {
        assert!(!cluster.exists(0, "tls:r"));
    }
    // Many rounds, so that records and partial reads are exercised.
    for i in 0..200 {
        let mut lock = redlock.try_lock(format!("tls:{i}"), TTL).expect("lock");
        redlock.unlock(&mut lock).expect("unlock");
    }
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn an_unknown_authority_or_another_name_is_refused() {
    let dir = temp_dir("refused");
    let pki = Pki::new("redlock-mio test CA");
    let server = pki.issue(&["example.invalid"], false);
    let (clusters, urls) = pki.tls_nodes(&dir, &server, 3, false);

    // The certificate names another host: `build` sees it at the
    // handshakes and refuses, naming each master.
    let err = Redlock::builder(&urls)
        .tls_config(client_config(&pki, None))
        .retry_count(0)
        .build()
        .expect_err("wrong name");
    let ConfigError::Misconfigured { failures } = &err else {
        panic!("expected Misconfigured, got {err:?}");
    };
    assert_eq!(failures.len(), 3, "{err}");
    assert!(
        failures.iter().all(|(_, e)| matches!(e, NodeError::Tls(_))),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("TLS failed") && text.contains("rediss://"),
        "{text}"
    );
    println!("{text}");

    // Signed by a CA the client does not trust.
    let stranger = Pki::new("someone else's CA");
    let err = Redlock::builder(&urls)
        .tls_config(client_config(&stranger, None))
        .retry_count(0)
        .build()
        .expect_err("unknown issuer");
    assert!(
        matches!(&err, ConfigError::Misconfigured { failures }
            if failures.iter().all(|(_, e)| matches!(e, NodeError::Tls(_)))),
        "{err}"
    );
    println!("{err}");

    // Built while the masters are down, a client meets the refusal at its
    // first handshakes: a configuration error, not "unavailable".
    for cluster in &clusters {
        cluster.stop(0);
    }
    let redlock = Redlock::builder(&urls)
        .tls_config(client_config(&pki, None))
        .retry_count(0)
        .build()
        .expect("masters down are not a configuration error");
    for cluster in &clusters {
        cluster.restart(0);
    }
    let seen = |redlock: &Redlock| match redlock.try_lock("r", TTL) {
        Err(Error::Misconfigured(report)) => {
            assert!(
                report
                    .nodes()
                    .iter()
                    .any(|s| matches!(s, NodeState::Failed(NodeError::Tls(_)))),
                "{report}"
            );
            true
        }
        Err(Error::Unavailable(_)) => false,
        other => panic!("wrong name: {other:?}"),
    };
    assert!(
        eventually(Duration::from_secs(10), || seen(&redlock)),
        "the refused certificates are never reported"
    );
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn client_certificates() {
    let dir = temp_dir("clients");
    let pki = Pki::new("redlock-mio test CA");
    let server = pki.issue(&["localhost"], false);
    let (_clusters, urls) = pki.tls_nodes(&dir, &server, 3, true);

    let client = pki.issue(&["redlock-client"], true);
    let redlock = Redlock::builder(&urls)
        .tls_config(client_config(&pki, Some(&client)))
        .require_handshakes(Require::All)
        .build()
        .expect("the servers accept the client certificate");
    let mut lock = redlock.try_lock("r", TTL).expect("lock");
    redlock.unlock(&mut lock).expect("unlock");

    // Without one, the servers refuse the session.
    let err = Redlock::builder(&urls)
        .tls_config(client_config(&pki, None))
        .require_handshakes(Require::All)
        .build()
        .expect_err("no client certificate");
    println!("{err}");
    let _ = fs::remove_dir_all(dir);
}
