//! The options of every AWS client the binaries make.

use std::time::Duration;
use zigzag_aws::{AwsOptions, CaBundle};

#[derive(Debug, Clone, clap::Args)]
pub struct AwsArgs {
    /// AWS region [default: from the environment or profile]
    #[arg(long, global = true)]
    pub region: Option<String>,
    /// Endpoint URL for every AWS service (overrides AWS_ENDPOINT_URL*)
    #[arg(long, value_name = "URL", global = true)]
    pub endpoint_url: Option<String>,
    /// Per-attempt timeout of an AWS call
    #[arg(long, default_value = "10s", value_parser = crate::duration::positive, value_name = "DURATION", global = true)]
    pub aws_timeout: Duration,
    /// PEM certificates to trust besides the platform's (a proxy's CA, or a
    /// local emulator's TLS port)
    #[arg(long, value_name = "FILE", value_parser = parse_ca_bundle, env = "AWS_CA_BUNDLE", global = true)]
    pub ca_bundle: Option<CaBundle>,
}

/// Read and checked when the command line is parsed: a bad bundle is one
/// clear error, never a retried "outage" (or the HTTP client's panic).
fn parse_ca_bundle(path: &str) -> Result<CaBundle, String> {
    CaBundle::read(std::path::Path::new(path)).map_err(|e| e.to_string())
}

impl AwsArgs {
    pub fn options(&self) -> AwsOptions {
        AwsOptions {
            region: self.region.clone(),
            endpoint_url: self.endpoint_url.clone(),
            attempt_timeout: self.aws_timeout.min(Duration::from_secs(3600)),
            ca_bundle: self.ca_bundle.clone(),
            ..AwsOptions::default()
        }
    }
}
