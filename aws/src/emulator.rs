//! Reaching the local emulators (DynamoDB Local, kinesis-local, kinesalite)
//! that `deploy/local/up.sh` starts. Its environment file sets
//! `AWS_ENDPOINT_URL_<SERVICE>`; tests read those through [`options`], which
//! insists on a loopback address so a mis-set variable can never send test
//! traffic to AWS.

use crate::AwsOptions;
use std::time::Duration;

/// The dummy credentials the emulators accept (kinesis-local wants a
/// non-numeric access key).
pub const ACCESS_KEY: &str = "AKIDZIGZAGLOCAL";
pub const SECRET_KEY: &str = "zigzag-local-secret";
pub const REGION: &str = "us-east-1";

/// Why the emulator for a service cannot be used.
#[derive(Debug)]
pub struct NotConfigured(pub String);

impl std::fmt::Display for NotConfigured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotConfigured {}

/// Set by `./test.sh`: a test that needs the emulators fails when they are
/// not configured, instead of being skipped.
pub const REQUIRE_VAR: &str = "ZIGZAG_REQUIRE_EMULATORS";

/// Whether a test that needs the emulators runs: true when
/// `deploy/local/up.sh`'s environment is set (`./test.sh` sets it). Without
/// it, `cargo test` on a bare machine skips the test and says so on stderr;
/// with [`REQUIRE_VAR`] set, a missing emulator is a failure, so the full
/// suite can never pass by skipping.
pub fn gate(test: &str) -> bool {
    let missing = [
        "AWS_ENDPOINT_URL_DYNAMODB",
        "AWS_ENDPOINT_URL_KINESIS",
        "ZIGZAG_KINESALITE_ENDPOINT",
        "ZIGZAG_KINESIS_TLS_ENDPOINT",
    ]
    .into_iter()
    .filter_map(|var| endpoint_in(var).err())
    .map(|e| e.0)
    .collect::<Vec<_>>();
    if missing.is_empty() {
        return true;
    }
    if std::env::var_os(REQUIRE_VAR).is_some_and(|v| !v.is_empty() && v != "0") {
        panic!("{test} needs the emulators and {REQUIRE_VAR} is set: {}", missing.join("; "));
    }
    // Written to stderr directly: the test harness captures `eprintln!` of
    // a passing test, and a skip must be seen.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "skipped {test}: it needs the local AWS emulators (./test.sh starts them): {}",
        missing[0]
    );
    false
}

/// The endpoint in `AWS_ENDPOINT_URL_<SERVICE>` (e.g. `DYNAMODB`,
/// `KINESIS`), which must be `http://127.0.0.1:<port>`.
pub fn endpoint(service: &str) -> Result<String, NotConfigured> {
    endpoint_in(&format!("AWS_ENDPOINT_URL_{service}"))
}

/// The loopback endpoint in the variable `var` (e.g.
/// `ZIGZAG_KINESALITE_ENDPOINT`, which up.sh sets when kinesalite runs).
pub fn endpoint_in(var: &str) -> Result<String, NotConfigured> {
    let url = std::env::var(var).map_err(|_| {
        NotConfigured(format!(
            "{var} is not set: start the emulators with deploy/local/up.sh and source the environment it prints \
             (or run the whole suite with ./test.sh)"
        ))
    })?;
    if !is_loopback_url(&url) {
        return Err(NotConfigured(format!("{var}={url} is not a loopback address; tests only talk to 127.0.0.1")));
    }
    Ok(url)
}

/// Options for a client of the emulator of `service`.
pub fn options(service: &str) -> Result<AwsOptions, NotConfigured> {
    Ok(options_at(endpoint(service)?))
}

/// Options for a client of the emulator at `url` (checked to be loopback
/// by [`endpoint`] / [`endpoint_in`], or a test's own proxy).
pub fn options_at(url: String) -> AwsOptions {
    AwsOptions {
        region: Some(REGION.to_string()),
        endpoint_url: Some(url),
        static_credentials: Some((ACCESS_KEY.to_string(), SECRET_KEY.to_string())),
        attempt_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(2),
        ca_bundle: None,
    }
}

/// kinesis-local's TLS port (where SubscribeToShard works: it needs HTTP/2)
/// and the certificate up.sh made for it, to trust in a test's client only:
/// `ZIGZAG_KINESIS_TLS_ENDPOINT` and `ZIGZAG_KINESIS_CA`.
pub fn kinesis_tls() -> Result<(String, crate::CaBundle), NotConfigured> {
    let url = endpoint_in("ZIGZAG_KINESIS_TLS_ENDPOINT")?;
    let ca = std::env::var("ZIGZAG_KINESIS_CA").map_err(|_| {
        NotConfigured("ZIGZAG_KINESIS_CA is not set: start the emulators with deploy/local/up.sh".into())
    })?;
    let bundle = crate::CaBundle::read(std::path::Path::new(&ca)).map_err(|e| NotConfigured(e.to_string()))?;
    Ok((url, bundle))
}

/// Options for a client of kinesis-local's TLS port ([`kinesis_tls`]).
pub fn kinesis_tls_options() -> Result<AwsOptions, NotConfigured> {
    let (url, bundle) = kinesis_tls()?;
    Ok(AwsOptions { ca_bundle: Some(bundle), ..options_at(url) })
}

pub fn is_loopback_url(url: &str) -> bool {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")).unwrap_or("");
    let host = rest.split(['/', '?']).next().unwrap_or("");
    host.strip_prefix("127.0.0.1").is_some_and(|port| port.is_empty() || port.starts_with(':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_urls_pass() {
        assert!(is_loopback_url("http://127.0.0.1:18000"));
        assert!(is_loopback_url("http://127.0.0.1:18000/"));
        assert!(is_loopback_url("https://127.0.0.1:18003"));
        assert!(!is_loopback_url("https://dynamodb.us-east-1.amazonaws.com"));
        assert!(!is_loopback_url("https://127.0.0.1.evil.com:443"));
        assert!(!is_loopback_url("http://127.0.0.1.evil.com:80"));
        assert!(!is_loopback_url("http://10.0.0.1:18000"));
    }
}
