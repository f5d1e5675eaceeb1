//! The TLS row: this crate over TLS against the same masters' plain ports,
//! interleaved in one run (feature `tls` of the library).

use std::sync::Arc;

use redlock_mio::rustls::pki_types::CertificateDer;
use redlock_mio::rustls::{ClientConfig, RootCertStore};
use support::pki::Pki;

use super::*;

/// Starts five masters that serve TLS beside plain TCP (certificates from
/// a private CA made here), and runs `cycles` `try_lock` + `unlock` cycles
/// per client, in interleaved batches of `batch`.
pub(crate) fn tls_vs_plain(cycles: u64, batch: u64, warm_up: u64) -> Result<PairRow> {
    let dir = std::env::temp_dir().join(format!("redlock-bench-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let pki = Pki::new("redlock-mio bench CA");
    let server = pki.issue(&["localhost"], false);
    let (clusters, tls_urls) = pki.tls_nodes(&dir, &server, MASTERS, false);
    pin::follow(
        clusters
            .iter()
            .flat_map(|c| c.nodes().iter().filter_map(|n| n.pid())),
    )?;
    let plain_urls: Vec<String> = clusters.iter().flat_map(Cluster::urls).collect();
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from(pki.ca_der()))?;
    let config = ClientConfig::builder_with_provider(Arc::new(
        redlock_mio::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let plain = Redlock::builder(&plain_urls)
        .request_timeout(REQUEST_TIMEOUT)
        .retry_count(0)
        .build()?;
    let tls = Redlock::builder(&tls_urls)
        .tls_config(Arc::new(config))
        .request_timeout(REQUEST_TIMEOUT)
        .retry_count(0)
        .build()?;
    let row = interleave(&plain, &tls, "redlock-bench:tls", cycles, batch, warm_up)?;
    drop(clusters);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(row)
}
