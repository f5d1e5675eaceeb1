//! `rediss://` (feature `tls`) against real `redis-server`s started with
//! `--tls-port` and certificates this test makes (a private CA, server and
//! client certificates). Each node also keeps its plain port, for the
//! harness's own checks.

#![cfg(feature = "tls")]
#![allow(clippy::expect_used, reason = "a test fails loudly on broken set-up")]

mod support;

use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use redlock_mio::rules::{NodeError, NodeState};
use redlock_mio::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use redlock_mio::rustls::{ClientConfig, RootCertStore};
use redlock_mio::{Error, Redlock, Require};
use support::cluster::{Cluster, ClusterOptions};

const TTL: Duration = Duration::from_secs(10);

/// A certificate authority and what it signed.
struct Pki {
    ca: Certificate,
    ca_key: KeyPair,
}

/// A certificate and its key, as PEM files would hold them.
struct Issued {
    cert: Certificate,
    key: KeyPair,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let ca_key = KeyPair::generate().expect("key");
        let ca = params.self_signed(&ca_key).expect("CA");
        Pki { ca, ca_key }
    }

    fn issue(&self, names: &[&str], usage: ExtendedKeyUsagePurpose) -> Issued {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("params");
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().expect("key");
        let cert = params
            .signed_by(&key, &self.ca, &self.ca_key)
            .expect("signed");
        Issued { cert, key }
    }

    /// A client configuration that trusts this CA, with `client` as its
    /// certificate if given.
    fn client_config(&self, client: Option<&Issued>) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(self.ca.der().clone()).expect("CA root");
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
                    vec![CertificateDer::from(issued.cert.der().to_vec())],
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(issued.key.serialize_der())),
                )
                .expect("client certificate"),
        };
        Arc::new(config)
    }
}

/// A port free on 127.0.0.1 now (the kernel's choice).
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// `n` single-node clusters serving TLS with `server` (signed by `pki`) on
/// a port of their own; `auth_clients` asks clients for certificates.
/// Returns them with their `rediss://` URLs.
fn tls_nodes(
    dir: &Path,
    pki: &Pki,
    server: &Issued,
    n: usize,
    auth_clients: bool,
) -> (Vec<Cluster>, Vec<String>) {
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        fs::write(&path, text).expect("write a PEM file");
        path.display().to_string()
    };
    let cert = write("server.crt", server.cert.pem());
    let key = write("server.key", server.key.serialize_pem());
    let ca = write("ca.crt", pki.ca.pem());
    let mut clusters = Vec::new();
    let mut urls = Vec::new();
    for _ in 0..n {
        let port = free_port();
        let cluster = ClusterOptions::new(1)
            .args([
                "--tls-port",
                &port.to_string(),
                "--tls-cert-file",
                &cert,
                "--tls-key-file",
                &key,
                "--tls-ca-cert-file",
                &ca,
                "--tls-auth-clients",
                if auth_clients { "yes" } else { "no" },
            ])
            .start();
        clusters.push(cluster);
        urls.push(format!("rediss://localhost:{port}"));
    }
    (clusters, urls)
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
    let server = pki.issue(&["localhost"], ExtendedKeyUsagePurpose::ServerAuth);
    let (clusters, urls) = tls_nodes(&dir, &pki, &server, 3, false);
    let redlock = Redlock::builder(&urls)
        .tls_config(pki.client_config(None))
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
    let server = pki.issue(&["example.invalid"], ExtendedKeyUsagePurpose::ServerAuth);
    let (_clusters, urls) = tls_nodes(&dir, &pki, &server, 3, false);

    // The certificate names another host.
    let redlock = Redlock::builder(&urls)
        .tls_config(pki.client_config(None))
        .retry_count(0)
        .build()
        .expect("build");
    let err = redlock.lock("r", TTL).expect_err("wrong name");
    assert!(matches!(err, Error::Misconfigured(_)), "{err}");
    let report = err.report().expect("report");
    assert!(
        report
            .nodes()
            .iter()
            .all(|s| matches!(s, NodeState::Failed(NodeError::Tls(_)))),
        "{report}"
    );
    let text = err.to_string();
    assert!(
        text.contains("TLS failed") && text.contains("rediss://"),
        "{text}"
    );
    println!("{text}");

    // Signed by a CA the client does not trust.
    let stranger = Pki::new("someone else's CA");
    let redlock = Redlock::builder(&urls)
        .tls_config(stranger.client_config(None))
        .retry_count(0)
        .build()
        .expect("build");
    let err = redlock.lock("r", TTL).expect_err("unknown issuer");
    assert!(matches!(err, Error::Misconfigured(_)), "{err}");
    println!("{err}");
    let _ = fs::remove_dir_all(dir);
}

#[test]
fn client_certificates() {
    let dir = temp_dir("clients");
    let pki = Pki::new("redlock-mio test CA");
    let server = pki.issue(&["localhost"], ExtendedKeyUsagePurpose::ServerAuth);
    let (_clusters, urls) = tls_nodes(&dir, &pki, &server, 3, true);

    let client = pki.issue(&["redlock-client"], ExtendedKeyUsagePurpose::ClientAuth);
    let redlock = Redlock::builder(&urls)
        .tls_config(pki.client_config(Some(&client)))
        .require_handshakes(Require::All)
        .build()
        .expect("the servers accept the client certificate");
    let mut lock = redlock.try_lock("r", TTL).expect("lock");
    redlock.unlock(&mut lock).expect("unlock");

    // Without one, the servers refuse the session.
    let err = Redlock::builder(&urls)
        .tls_config(pki.client_config(None))
        .require_handshakes(Require::All)
        .build()
        .expect_err("no client certificate");
    println!("{err}");
    let _ = fs::remove_dir_all(dir);
}
