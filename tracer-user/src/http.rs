//! What every HTTP client of ours (the profile pushes, the debuginfod client) starts from.

use ureq::{
    config::ConfigBuilder,
    tls::{RootCerts, TlsConfig},
    typestate::AgentScope,
};

/// An agent's configuration: an HTTP error is an answer to read, not a failed call; TLS is
/// checked against the system's CA store, as the other tools on the host check it.
pub fn agent_config() -> ConfigBuilder<AgentScope> {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(
            TlsConfig::builder()
                .root_certs(RootCerts::PlatformVerifier)
                .build(),
        )
}
