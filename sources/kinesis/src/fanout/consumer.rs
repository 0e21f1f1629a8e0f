//! The stream consumer of enhanced fan-out: registered once per stream and
//! name, found again by every worker and every restart.
//!
//! RegisterStreamConsumer is called first; "in use" means it exists.
//! DescribeStreamConsumer then waits for ACTIVE (a new consumer is CREATING
//! for a few seconds; SubscribeToShard refuses it until then). A consumer
//! being deleted (DELETING) is waited out and registered again.
//!
//! Zigzag never deregisters the consumer: other workers share it, and a
//! worker stopping says nothing about whether the fleet is done. It is
//! billed per consumer-shard-hour while registered; OPERATING.md says how to
//! remove it.

use crate::stream::{stream_arn, stream_error};
use aws_sdk_kinesis::types::ConsumerStatus;
use aws_sdk_kinesis::Client;
use std::time::{Duration, Instant};
use zigzag_model::source::SourceError;

/// How long a consumer may stay CREATING or DELETING before the wait is
/// reported as an outage (the caller retries).
const STATUS_WAIT: Duration = Duration::from_secs(120);
const STATUS_POLL: Duration = Duration::from_millis(500);

/// The consumer `name` of `stream`, registered if needed, once ACTIVE: its ARN.
pub(crate) async fn active_consumer(client: &Client, stream: &str, name: &str) -> Result<String, SourceError> {
    let stream_arn = stream_arn(client, stream).await?;
    let started = Instant::now();
    loop {
        if started.elapsed() > STATUS_WAIT {
            return Err(SourceError::Unavailable(format!(
                "stream consumer {name} of {stream} was not found ACTIVE within {STATUS_WAIT:?}"
            )));
        }
        match client.register_stream_consumer().stream_arn(&stream_arn).consumer_name(name).send().await {
            Ok(out) => tracing::info!(consumer = %name, stream = %stream,
                arn = out.consumer().map(|c| c.consumer_arn()).unwrap_or_default(), "registered the stream consumer"),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_in_use_exception()) => {}
            Err(e) => return Err(stream_error("RegisterStreamConsumer", stream, &e)),
        }
        loop {
            let described = client.describe_stream_consumer().stream_arn(&stream_arn).consumer_name(name).send().await;
            let consumer = match described {
                Ok(out) => out.consumer_description,
                // Deleted since (DELETING ended): register it again.
                Err(e) if e.as_service_error().is_some_and(|s| s.is_resource_not_found_exception()) => break,
                Err(e) => return Err(stream_error("DescribeStreamConsumer", stream, &e)),
            };
            let Some(consumer) = consumer else {
                return Err(SourceError::Unavailable(format!(
                    "DescribeStreamConsumer {name} on {stream}: no description"
                )));
            };
            match consumer.consumer_status() {
                ConsumerStatus::Active => return Ok(consumer.consumer_arn().to_string()),
                status => {
                    if started.elapsed() > STATUS_WAIT {
                        return Err(SourceError::Unavailable(format!(
                            "stream consumer {name} of {stream} is still {status} after {STATUS_WAIT:?}"
                        )));
                    }
                    tracing::debug!(consumer = %name, %status, "waiting for the stream consumer to be ACTIVE");
                    tokio::time::sleep(STATUS_POLL).await;
                }
            }
        }
    }
}
