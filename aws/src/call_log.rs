//! An audit of the AWS operations a process calls: with
//! `ZIGZAG_AWS_CALL_LOG=<file>` in its environment, every operation any of
//! our SDK clients starts (once per call, not per retry attempt) is appended
//! to the file as one `service:Operation` line in IAM's spelling
//! (`dynamodb:Query`, `kinesis:GetRecords`). This is how the IAM policies in
//! `deploy/aws/` are checked against what each binary really calls
//! (`app/tests/iam_policy.rs`), and how an operator finds what a denied
//! call was. Without the variable the interceptor does nothing.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The environment variable naming the file the calls are appended to.
pub const CALL_LOG_ENV: &str = "ZIGZAG_AWS_CALL_LOG";

/// The interceptor every client of ours carries (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct CallLog {
    out: Option<Arc<Mutex<File>>>,
}

impl CallLog {
    /// Appends to the file named by [`CALL_LOG_ENV`], if set. A file that
    /// cannot be opened is a warning, not a failure: the audit never stops
    /// the pipeline.
    pub fn from_env() -> Self {
        match std::env::var_os(CALL_LOG_ENV) {
            Some(path) => Self::to_file(Path::new(&path)).unwrap_or_else(|e| {
                tracing::warn!(path = ?path, error = %e, "cannot open {CALL_LOG_ENV}: AWS calls are not logged");
                CallLog::default()
            }),
            None => CallLog::default(),
        }
    }

    pub fn to_file(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(CallLog { out: Some(Arc::new(Mutex::new(file))) })
    }
}

/// `service:Operation` as IAM spells it: the SDK's service name lowercased
/// (`DynamoDB` → `dynamodb`, `Kinesis` → `kinesis`; true of both services
/// Zigzag calls), the operation as it is.
pub fn iam_action(metadata: &Metadata) -> String {
    format!("{}:{}", metadata.service().to_ascii_lowercase(), metadata.name())
}

impl Intercept for CallLog {
    fn name(&self) -> &'static str {
        "zigzag-call-log"
    }

    // Not read_before_execution: a client's interceptors run that before
    // the operation's configuration (and its Metadata) is in the bag.
    // Serialization happens once per call, before the retry loop.
    fn read_before_serialization(
        &self,
        _context: &BeforeSerializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let (Some(out), Some(metadata)) = (&self.out, cfg.load::<Metadata>()) else { return Ok(()) };
        // One short write per line on an O_APPEND file: lines of several
        // processes sharing the file do not interleave.
        let line = format!("{}\n", iam_action(metadata));
        if let Ok(mut file) = out.lock() {
            let _ = file.write_all(line.as_bytes());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_spelled_as_iam_spells_them() {
        assert_eq!(iam_action(&Metadata::new("PutItem", "DynamoDB")), "dynamodb:PutItem");
        assert_eq!(iam_action(&Metadata::new("GetRecords", "Kinesis")), "kinesis:GetRecords");
    }
}
