//! Stream-level calls: the shard list (ListShards, paginated) and creating
//! a stream for local runs and tests.

use aws_sdk_kinesis::types::{Shard, StreamStatus};
use aws_sdk_kinesis::Client;
use std::time::{Duration, Instant};
use thiserror::Error;
use zigzag_model::source::SourceError;

#[derive(Debug, Error)]
pub enum StreamError {
    #[error("stream {stream}: {message}")]
    Sdk { stream: String, message: String },
    #[error("stream {stream} did not become ACTIVE within {0:?}", .waited)]
    NotActive { stream: String, waited: Duration },
}

/// A stream-level call's error, classified (throttled, unavailable, or
/// fatal for the whole stream, shard "*") so callers retry what may pass.
pub(crate) fn stream_error<E>(call: &str, stream: &str, e: &aws_sdk_kinesis::error::SdkError<E>) -> SourceError
where
    E: aws_sdk_kinesis::error::ProvideErrorMetadata + std::error::Error + 'static,
{
    let message = format!("{call} on {stream}: {}", zigzag_aws::describe(e));
    match zigzag_aws::classify(e) {
        zigzag_aws::ErrorClass::Throttled => SourceError::Throttled(message),
        zigzag_aws::ErrorClass::Unavailable => SourceError::Unavailable(message),
        zigzag_aws::ErrorClass::Fatal => SourceError::Shard { shard: "*".into(), message },
    }
}

/// ListShards page size. Kinesis allows up to 10,000; a small page keeps
/// responses small and exercises the pagination on every real stream.
pub const LIST_SHARDS_PAGE: i32 = 1000;

/// Every shard of the stream (open and closed), in the order Kinesis lists
/// them, following NextToken to the end. Errors are classified (throttled,
/// unavailable, or fatal) so callers retry what may pass.
pub async fn list_shards(client: &Client, stream: &str, page_size: i32) -> Result<Vec<Shard>, SourceError> {
    let mut shards = Vec::new();
    let mut token: Option<String> = None;
    loop {
        // With a NextToken, the stream name must not be sent again.
        let req = match &token {
            Some(t) => client.list_shards().next_token(t),
            None => client.list_shards().stream_name(stream),
        };
        let out = req.max_results(page_size).send().await.map_err(|e| stream_error("ListShards", stream, &e))?;
        shards.extend(out.shards().iter().cloned());
        match out.next_token {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => return Ok(shards),
        }
    }
}

/// The stream's incarnation: its creation time in ms since the epoch (a
/// stream deleted and created again under its name gets another), from
/// DescribeStreamSummary.
pub async fn stream_identity(client: &Client, stream: &str) -> Result<String, SourceError> {
    let out = describe_summary(client, stream).await?;
    let created = out.stream_description_summary().map(|d| d.stream_creation_timestamp().to_millis());
    match created {
        Some(Ok(ms)) => Ok(ms.to_string()),
        _ => Err(SourceError::Shard { shard: "*".into(), message: format!("{stream}: no creation time described") }),
    }
}

/// DescribeStreamSummary, its error classified.
async fn describe_summary(
    client: &Client,
    stream: &str,
) -> Result<aws_sdk_kinesis::operation::describe_stream_summary::DescribeStreamSummaryOutput, SourceError> {
    client
        .describe_stream_summary()
        .stream_name(stream)
        .send()
        .await
        .map_err(|e| stream_error("DescribeStreamSummary", stream, &e))
}

/// The stream's ARN (what stream consumers are registered on).
pub(crate) async fn stream_arn(client: &Client, stream: &str) -> Result<String, SourceError> {
    let out = describe_summary(client, stream).await?;
    out.stream_description_summary()
        .map(|d| d.stream_arn().to_string())
        .ok_or_else(|| SourceError::Shard { shard: "*".into(), message: format!("{stream}: no stream ARN described") })
}

/// Creates the stream with `shards` shards unless it exists, then waits
/// until it is ACTIVE.
pub async fn ensure_stream(client: &Client, stream: &str, shards: i32) -> Result<(), StreamError> {
    let sdk = |message: String| StreamError::Sdk { stream: stream.to_string(), message };
    match client.create_stream().stream_name(stream).shard_count(shards).send().await {
        Ok(_) => {}
        Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) => {}
        Err(e) => return Err(sdk(zigzag_aws::describe(&e))),
    }
    let waited = Duration::from_secs(60);
    let start = Instant::now();
    while start.elapsed() < waited {
        let out = client
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await
            .map_err(|e| sdk(zigzag_aws::describe(&e)))?;
        if out.stream_description_summary().map(|d| d.stream_status()) == Some(&StreamStatus::Active) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(StreamError::NotActive { stream: stream.to_string(), waited })
}
