//! The options of every AWS client the binaries make.

use std::time::Duration;
use zigzag_aws::AwsOptions;

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
}

impl AwsArgs {
    pub fn options(&self) -> AwsOptions {
        AwsOptions {
            region: self.region.clone(),
            endpoint_url: self.endpoint_url.clone(),
            attempt_timeout: self.aws_timeout.min(Duration::from_secs(3600)),
            ..AwsOptions::default()
        }
    }
}
