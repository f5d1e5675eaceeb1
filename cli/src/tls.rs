//! TLS for `rediss://` masters: the CA file and client certificate given
//! on the command line, as a rustls configuration.

use std::path::Path;
use std::sync::Arc;

use redlock_mio::rustls::pki_types::pem::PemObject;
use redlock_mio::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use redlock_mio::rustls::{ClientConfig, RootCertStore};

/// A shared client configuration.
pub(crate) type Config = Arc<ClientConfig>;

/// The configuration the options ask for: `None` (the library's default,
/// the system's roots) when no CA file is given.
///
/// # Errors
///
/// A message naming the file that could not be read or used.
pub(crate) fn config(
    ca_file: Option<&Path>,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Result<Option<Config>, String> {
    let Some(ca_file) = ca_file else {
        if cert.is_some() {
            return Err("--cert needs --ca-file (the CA that signed the servers)".to_owned());
        }
        return Ok(None);
    };
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(ca_file)
        .map_err(|e| format!("--ca-file {}: {e}", ca_file.display()))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("--ca-file {}: {e}", ca_file.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("--ca-file {}: {e}", ca_file.display()))?;
    }
    if roots.is_empty() {
        return Err(format!(
            "--ca-file {}: no certificate in it",
            ca_file.display()
        ));
    }
    let builder = ClientConfig::builder_with_provider(Arc::new(
        redlock_mio::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots);
    let config = match (cert, key) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("--cert {}: {e}", cert.display()))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| format!("--key {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("--cert/--key: {e}"))?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Some(Arc::new(config)))
}
