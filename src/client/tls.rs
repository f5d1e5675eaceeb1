//! The default TLS configuration (feature `tls`).

use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};

use crate::error::ConfigError;

/// A client configuration that trusts the operating system's roots, with
/// ring as the crypto provider and rustls's safe default versions.
pub(super) fn system_roots() -> Result<Arc<ClientConfig>, ConfigError> {
    let mut roots = RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    for cert in found.certs {
        // A certificate the store cannot use is skipped, as browsers do.
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        let why = found
            .errors
            .first()
            .map_or_else(|| "none installed".to_owned(), ToString::to_string);
        return Err(ConfigError::Tls(format!(
            "no root certificates found in the system store ({why}): give them with Builder::tls_config"
        )));
    }
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| ConfigError::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
    Ok(Arc::new(config))
}
