//! A private certificate authority for TLS tests and the TLS bench row:
//! a CA, server and client certificates made with rcgen, and
//! `redis-server` nodes that serve TLS on a port of their own beside their
//! plain one (which the harness keeps using).
//!
//! Set-up code: it panics, loudly, when rcgen or a file write fails.
#![allow(clippy::expect_used)]

use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

use super::cluster::{Cluster, ClusterOptions};

/// A certificate authority.
pub struct Pki {
    ca: Certificate,
    ca_key: KeyPair,
}

/// A certificate and its key.
pub struct Issued {
    /// The certificate.
    pub cert: Certificate,
    /// Its private key.
    pub key: KeyPair,
}

impl Issued {
    /// The certificate, DER.
    pub fn cert_der(&self) -> Vec<u8> {
        self.cert.der().to_vec()
    }

    /// The key, PKCS#8 DER.
    pub fn key_der(&self) -> Vec<u8> {
        self.key.serialize_der()
    }
}

impl Pki {
    /// A new CA named `name`.
    ///
    /// # Panics
    ///
    /// If rcgen cannot make it.
    pub fn new(name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let ca_key = KeyPair::generate().expect("CA key");
        let ca = params.self_signed(&ca_key).expect("CA certificate");
        Pki { ca, ca_key }
    }

    /// The CA certificate, DER (a root for the client).
    pub fn ca_der(&self) -> Vec<u8> {
        self.ca.der().to_vec()
    }

    /// A certificate for `names` (host names or IP addresses), for a
    /// server (`client` false) or a client.
    ///
    /// # Panics
    ///
    /// If rcgen cannot make it.
    pub fn issue(&self, names: &[&str], client: bool) -> Issued {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("params");
        params.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        let key = KeyPair::generate().expect("key");
        let cert = params
            .signed_by(&key, &self.ca, &self.ca_key)
            .expect("signed");
        Issued { cert, key }
    }

    /// `n` single-node clusters serving TLS with `server` on a port of
    /// their own (and plain TCP on their usual one); `auth_clients` asks
    /// clients for certificates. The PEM files go to `dir`. Returns the
    /// clusters and their `rediss://localhost:port` URLs.
    ///
    /// # Panics
    ///
    /// If a file cannot be written or a server cannot start.
    pub fn tls_nodes(
        &self,
        dir: &Path,
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
        let ca = write("ca.crt", self.ca.pem());
        let mut clusters = Vec::new();
        let mut urls = Vec::new();
        for _ in 0..n {
            // The kernel's choice of a free port; redis-server binds it
            // right after (a clash fails the start loudly).
            let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
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
}
