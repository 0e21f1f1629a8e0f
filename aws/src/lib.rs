//! Shared AWS plumbing for the DynamoDB store and the Kinesis source:
//!
//! - [`load_config`]: the SDK configuration from aws-config's default chain
//!   (environment, profiles, SSO, instance/container roles), the region, and
//!   the standard endpoint variables `AWS_ENDPOINT_URL` /
//!   `AWS_ENDPOINT_URL_<SERVICE>` (how tests reach the emulators). The SDK's
//!   own retries are switched off: every call site retries through
//!   `zigzag_core::retry`, so retries are bounded once and counted once.
//! - [`classify`]: which SDK errors are worth retrying and why.
//! - [`tls`]: extra certificates to trust (`AWS_CA_BUNDLE`).
//! - [`emulator`]: options for the local emulators, refusing anything but
//!   loopback (tests never reach a real AWS account by accident).
//! - [`call_log`]: every operation called, logged for an IAM audit when
//!   `ZIGZAG_AWS_CALL_LOG` is set; every client carries it.

pub mod call_log;
pub mod emulator;
pub mod tls;

pub use call_log::CallLog;
pub use tls::{CaBundle, CaBundleError};

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::Credentials;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use std::time::Duration;

/// How long one attempt of a call may take before it counts as a timeout.
/// Generous: a 1 MB Query or a 10 MB GetRecords page over a slow link must
/// not be cut off, but a hung connection must not stall a flush forever.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
pub struct AwsOptions {
    /// Overrides the region of the default chain (`AWS_REGION`, profile).
    pub region: Option<String>,
    /// Overrides the endpoint of every service (`--endpoint-url`); the
    /// standard `AWS_ENDPOINT_URL[_<SERVICE>]` variables work without it.
    pub endpoint_url: Option<String>,
    /// Static credentials instead of the default chain (emulators).
    pub static_credentials: Option<(String, String)>,
    pub attempt_timeout: Duration,
    pub connect_timeout: Duration,
    /// Certificates to trust besides the platform's (`AWS_CA_BUNDLE`).
    pub ca_bundle: Option<CaBundle>,
}

impl Default for AwsOptions {
    fn default() -> Self {
        AwsOptions {
            region: None,
            endpoint_url: None,
            static_credentials: None,
            attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
            connect_timeout: Duration::from_secs(3),
            ca_bundle: None,
        }
    }
}

/// Loads the SDK configuration (see the module docs).
pub async fn load_config(opts: &AwsOptions) -> SdkConfig {
    let mut loader =
        aws_config::defaults(BehaviorVersion::latest()).retry_config(RetryConfig::disabled()).timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(opts.connect_timeout)
                .operation_attempt_timeout(opts.attempt_timeout)
                .build(),
        );
    if let Some(region) = &opts.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(url) = &opts.endpoint_url {
        loader = loader.endpoint_url(url);
    }
    if let Some((key, secret)) = &opts.static_credentials {
        loader = loader.credentials_provider(Credentials::new(key, secret, None, None, "zigzag-static"));
    }
    if let Some(bundle) = &opts.ca_bundle {
        loader = loader.http_client(bundle.http_client());
    }
    loader.load().await
}

/// What a failed call means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The service asked us to slow down (throughput or request-rate limits).
    Throttled,
    /// No answer in time, a broken connection, or a server-side failure:
    /// worth retrying, and the request may or may not have been applied.
    Unavailable,
    /// Anything else: retrying would fail the same way.
    Fatal,
}

/// Error codes that mean "slow down", across DynamoDB and Kinesis.
const THROTTLING_CODES: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "Throttling",
    "RequestLimitExceeded",
    "LimitExceededException",
    "TooManyRequestsException",
];

/// Error codes of server-side failures (in addition to any 5xx status).
const UNAVAILABLE_CODES: &[&str] =
    &["InternalServerError", "InternalFailure", "ServiceUnavailable", "ServiceUnavailableException"];

/// Classifies an SDK error. Codes are compared without the JSON protocols'
/// `namespace#` prefix (the SDK strips it already; we strip it again in case).
pub fn classify<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> ErrorClass {
    match err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            ErrorClass::Unavailable
        }
        SdkError::ServiceError(ctx) => {
            let code = ctx.err().code().map(|c| c.rsplit('#').next().unwrap_or(c));
            if code.is_some_and(|c| THROTTLING_CODES.contains(&c)) {
                ErrorClass::Throttled
            } else if code.is_some_and(|c| UNAVAILABLE_CODES.contains(&c)) || ctx.raw().status().is_server_error() {
                ErrorClass::Unavailable
            } else {
                ErrorClass::Fatal
            }
        }
        _ => ErrorClass::Fatal,
    }
}

/// A one-line description of an SDK error: code and message when the
/// service sent them, otherwise the error chain (the SDK's own Display is
/// just "service error").
pub fn describe<E: ProvideErrorMetadata + std::error::Error + 'static>(err: &SdkError<E, HttpResponse>) -> String {
    match err {
        SdkError::ServiceError(ctx) => {
            let e = ctx.err();
            format!(
                "{} (HTTP {}): {}",
                e.code().unwrap_or("unknown error"),
                ctx.raw().status().as_u16(),
                e.message().unwrap_or("no message")
            )
        }
        other => {
            let mut s = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(cause) = source {
                s.push_str(": ");
                s.push_str(&cause.to_string());
                source = cause.source();
            }
            s
        }
    }
}
