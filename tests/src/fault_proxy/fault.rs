//! What a fault does to a request, and the real services' error shapes.

use std::time::Duration;

/// What happens to a request a rule picked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with an AWS error without forwarding: the emulator never sees the call, exactly like
    /// a throttled call that AWS rejected up front.
    Error { status: u16, shape: String, message: String },
    /// Forward the call (so the emulator applies it), wait for its answer, then answer with this
    /// error instead: a write that succeeded although the client was told it failed, which its
    /// retry must not count twice. Unlike [`Fault::ApplyThenTimeout`] it costs no waiting.
    ApplyThenError { status: u16, shape: String, message: String },
    /// Forward the call (so the emulator applies it), discard the answer, keep the client waiting
    /// for `hold` and then close the connection: the client times out (when `hold` exceeds its
    /// attempt timeout) although the write happened.
    ApplyThenTimeout { hold: Duration },
    /// Wait this long before forwarding: a slow service, without failing anything.
    Delay(Duration),
    /// Close the connection without an answer and without forwarding: a broken connection, which
    /// the SDK reports as a dispatch/response failure rather than a service error.
    Reset,
}

impl Fault {
    /// The key under which [`TargetStats::injected`](super::TargetStats::injected) counts this fault: the error shape for an
    /// error, so tests can count throttles by shape, and a fixed name otherwise.
    pub fn label(&self) -> String {
        match self {
            Fault::Error { shape, .. } => shape.clone(),
            Fault::ApplyThenError { shape, .. } => format!("apply-then-error:{shape}"),
            Fault::ApplyThenTimeout { .. } => "apply-then-timeout".to_owned(),
            Fault::Delay(_) => "delay".to_owned(),
            Fault::Reset => "reset".to_owned(),
        }
    }

    /// Whether the emulator sees (and applies) a request this fault picked.
    pub fn forwards(&self) -> bool {
        matches!(self, Fault::ApplyThenError { .. } | Fault::ApplyThenTimeout { .. } | Fault::Delay(_))
    }

    fn error(status: u16, shape: &str, message: &str) -> Fault {
        Fault::Error { status, shape: shape.to_owned(), message: message.to_owned() }
    }
}

/// Targets and real error shapes of DynamoDB (awsJson1_0). The SDK strips everything up to `#`
/// from the error code (`sanitize_error_code`), so a namespaced shape lands in the typed variant of
/// its bare name.
pub mod dynamodb {
    use super::Fault;

    /// Prefix of every DynamoDB target: a rule with it matches all DynamoDB calls.
    pub const TARGET_PREFIX: &str = "DynamoDB_20120810.";
    pub const UPDATE_ITEM: &str = "DynamoDB_20120810.UpdateItem";
    pub const PUT_ITEM: &str = "DynamoDB_20120810.PutItem";
    pub const GET_ITEM: &str = "DynamoDB_20120810.GetItem";
    pub const BATCH_WRITE_ITEM: &str = "DynamoDB_20120810.BatchWriteItem";
    pub const BATCH_GET_ITEM: &str = "DynamoDB_20120810.BatchGetItem";
    pub const QUERY: &str = "DynamoDB_20120810.Query";
    pub const SCAN: &str = "DynamoDB_20120810.Scan";
    pub const TRANSACT_WRITE_ITEMS: &str = "DynamoDB_20120810.TransactWriteItems";
    pub const DESCRIBE_TABLE: &str = "DynamoDB_20120810.DescribeTable";
    pub const CREATE_TABLE: &str = "DynamoDB_20120810.CreateTable";

    pub const PROVISIONED_THROUGHPUT_EXCEEDED: &str =
        "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException";
    pub const THROTTLING: &str = "com.amazonaws.dynamodb.v20120810#ThrottlingException";
    /// The same throttle as [`THROTTLING`] from the request router rather than the table.
    pub const CORAL_THROTTLING: &str = "com.amazon.coral.availability#ThrottlingException";
    pub const REQUEST_LIMIT_EXCEEDED: &str = "com.amazonaws.dynamodb.v20120810#RequestLimitExceeded";
    pub const INTERNAL_SERVER_ERROR: &str = "com.amazonaws.dynamodb.v20120810#InternalServerError";
    pub const SERVICE_UNAVAILABLE: &str = "com.amazon.coral.availability#ServiceUnavailableException";

    /// 400: a provisioned table's capacity was exceeded.
    pub fn provisioned_throughput_exceeded() -> Fault {
        Fault::error(
            400,
            PROVISIONED_THROUGHPUT_EXCEEDED,
            "The level of configured provisioned throughput for the table was exceeded. \
             Consider increasing your provisioning level with the UpdateTable API.",
        )
    }

    /// 400: an on-demand table (or a hot partition) is throttled.
    pub fn throttling() -> Fault {
        Fault::error(
            400,
            THROTTLING,
            "Throughput exceeds the current capacity of your table or index. DynamoDB is automatically \
             scaling your table or index so please try again shortly. If exceptions persist, check if \
             you have a hot key: \
             https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html",
        )
    }

    /// 400: the router's throttle, namespaced `com.amazon.coral.availability`.
    pub fn coral_throttling() -> Fault {
        Fault::error(400, CORAL_THROTTLING, "Rate of requests exceeds the allowed throughput.")
    }

    /// 400: the account-level request limit.
    pub fn request_limit_exceeded() -> Fault {
        Fault::error(
            400,
            REQUEST_LIMIT_EXCEEDED,
            "Throughput exceeds the current throughput limit for your account. \
             Please contact AWS Support at https://aws.amazon.com/support request a limit increase",
        )
    }

    /// 500: a server-side failure.
    pub fn internal_server_error() -> Fault {
        Fault::error(500, INTERNAL_SERVER_ERROR, "Internal server error")
    }

    /// 503: the service is briefly unavailable.
    pub fn service_unavailable() -> Fault {
        Fault::error(503, SERVICE_UNAVAILABLE, "Service Unavailable")
    }
}

/// Targets and real error shapes of Kinesis (awsJson1_1), whose `__type` carries no namespace.
pub mod kinesis {
    use super::Fault;

    /// Prefix of every Kinesis target: a rule with it matches all Kinesis calls.
    pub const TARGET_PREFIX: &str = "Kinesis_20131202.";
    pub const GET_RECORDS: &str = "Kinesis_20131202.GetRecords";
    pub const GET_SHARD_ITERATOR: &str = "Kinesis_20131202.GetShardIterator";
    pub const LIST_SHARDS: &str = "Kinesis_20131202.ListShards";
    pub const PUT_RECORDS: &str = "Kinesis_20131202.PutRecords";
    pub const PUT_RECORD: &str = "Kinesis_20131202.PutRecord";
    pub const DESCRIBE_STREAM_SUMMARY: &str = "Kinesis_20131202.DescribeStreamSummary";
    pub const DESCRIBE_STREAM: &str = "Kinesis_20131202.DescribeStream";
    pub const CREATE_STREAM: &str = "Kinesis_20131202.CreateStream";

    pub const PROVISIONED_THROUGHPUT_EXCEEDED: &str = "ProvisionedThroughputExceededException";
    pub const LIMIT_EXCEEDED: &str = "LimitExceededException";
    /// The common (unmodelled) 500 every AWS JSON service may send.
    pub const INTERNAL_FAILURE: &str = "InternalFailure";
    /// Kinesis's modelled 500, which the SDK turns into a typed `InternalFailureException` variant.
    pub const INTERNAL_FAILURE_EXCEPTION: &str = "InternalFailureException";
    pub const SERVICE_UNAVAILABLE: &str = "ServiceUnavailable";

    /// The account id the emulators report.
    pub const ACCOUNT: &str = "000000000000";

    /// 400: a shard's read (5 calls/s, 2 MB/s) or write (1000 records/s, 1 MB/s) limit.
    pub fn provisioned_throughput_exceeded(stream: &str, shard_id: &str) -> Fault {
        Fault::error(
            400,
            PROVISIONED_THROUGHPUT_EXCEEDED,
            &format!("Rate exceeded for shard {shard_id} in stream {stream} under account {ACCOUNT}."),
        )
    }

    /// 400: a control-plane rate limit (ListShards, DescribeStreamSummary, ...).
    pub fn limit_exceeded(stream: &str) -> Fault {
        Fault::error(400, LIMIT_EXCEEDED, &format!("Rate exceeded for stream {stream} under account {ACCOUNT}."))
    }

    /// 500: the common `InternalFailure` (the SDK keeps it unhandled, code `InternalFailure`).
    pub fn internal_failure() -> Fault {
        Fault::error(500, INTERNAL_FAILURE, "Internal service failure.")
    }

    /// 500: Kinesis's modelled `InternalFailureException`.
    pub fn internal_failure_exception() -> Fault {
        Fault::error(500, INTERNAL_FAILURE_EXCEPTION, "Internal service failure.")
    }

    /// 503: the service is briefly unavailable.
    pub fn service_unavailable() -> Fault {
        Fault::error(503, SERVICE_UNAVAILABLE, "The request has failed due to a temporary failure of the server.")
    }
}
