//! The real SDK clients, pointed at the proxy: each injected shape must land in the typed
//! variant (or, for unmodelled shapes, the unhandled error with the bare code) that production
//! code and our retry classification match on.

use super::*;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::operation::RequestId;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::operation::get_records::GetRecordsError;
use aws_sdk_kinesis::operation::list_shards::ListShardsError;

fn dynamodb_client(url: &str, attempt_timeout: Option<Duration>) -> aws_sdk_dynamodb::Client {
    use aws_sdk_dynamodb::config::{retry::RetryConfig, timeout::TimeoutConfig, BehaviorVersion, Credentials, Region};
    let mut timeouts = TimeoutConfig::builder();
    if let Some(t) = attempt_timeout {
        timeouts = timeouts.operation_attempt_timeout(t);
    }
    let conf = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("AKIDFAULTPROXY", "secret", None, None, "fault-proxy-test"))
        .endpoint_url(url)
        // Our code retries through zigzag_core::retry with SDK retries off; so do we here, so
        // that each call is exactly one request.
        .retry_config(RetryConfig::disabled())
        .timeout_config(timeouts.build())
        .build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

fn kinesis_client(url: &str) -> aws_sdk_kinesis::Client {
    use aws_sdk_kinesis::config::{retry::RetryConfig, BehaviorVersion, Credentials, Region};
    let conf = aws_sdk_kinesis::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("AKIDFAULTPROXY", "secret", None, None, "fault-proxy-test"))
        .endpoint_url(url)
        .retry_config(RetryConfig::disabled())
        .build();
    aws_sdk_kinesis::Client::from_conf(conf)
}

async fn update(client: &aws_sdk_dynamodb::Client) -> Result<(), SdkError<UpdateItemError>> {
    client
        .update_item()
        .table_name("clicks")
        .key("pk", AttributeValue::S("p".into()))
        .key("sk", AttributeValue::S("s".into()))
        .update_expression("ADD c :one")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .send()
        .await
        .map(|_| ())
}

fn message(fault: &Fault) -> String {
    match fault {
        Fault::Error { message, .. } => message.clone(),
        _ => unreachable!(),
    }
}

#[tokio::test]
async fn dynamodb_errors_become_typed_update_item_variants() {
    let upstream = Upstream::start().await;
    let proxy = FaultProxy::start(upstream.addr, vec![], 0).await.unwrap();
    let client = dynamodb_client(&proxy.url(), None);

    // Passes through: the upstream's JSON answer is a valid (empty) UpdateItemOutput.
    update(&client).await.expect("an untouched call succeeds");
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].target(), dynamodb::UPDATE_ITEM);

    type Check = fn(&UpdateItemError) -> bool;
    let cases: Vec<(Fault, u16, &str, Check)> = vec![
        (dynamodb::provisioned_throughput_exceeded(), 400, "ProvisionedThroughputExceededException", |e| {
            matches!(e, UpdateItemError::ProvisionedThroughputExceededException(_))
        }),
        (dynamodb::throttling(), 400, "ThrottlingException", |e| matches!(e, UpdateItemError::ThrottlingException(_))),
        (dynamodb::coral_throttling(), 400, "ThrottlingException", |e| {
            matches!(e, UpdateItemError::ThrottlingException(_))
        }),
        (dynamodb::request_limit_exceeded(), 400, "RequestLimitExceeded", |e| {
            matches!(e, UpdateItemError::RequestLimitExceeded(_))
        }),
        (dynamodb::internal_server_error(), 500, "InternalServerError", |e| {
            matches!(e, UpdateItemError::InternalServerError(_))
        }),
        // Not modelled by DynamoDB: the unhandled error, with the bare code and the 503.
        (dynamodb::service_unavailable(), 503, "ServiceUnavailableException", |e| {
            format!("{e:?}").starts_with("Unhandled")
        }),
    ];
    for (fault, status, code, check) in cases {
        proxy.set_rules(vec![Rule::new(dynamodb::UPDATE_ITEM, 1.0, vec![fault.clone()])]).unwrap();
        let err = update(&client).await.expect_err("the proxy answers with the error");
        let raw_status = match &err {
            SdkError::ServiceError(ctx) => ctx.raw().status().as_u16(),
            other => panic!("{code}: expected a service error, got {other:?}"),
        };
        assert_eq!(raw_status, status, "{code}");
        let e = err.into_service_error();
        assert!(check(&e), "{code}: got {e:?}");
        assert_eq!(e.code(), Some(code));
        assert_eq!(e.message(), Some(message(&fault).as_str()));
        assert!(e.request_id().is_some_and(|id| id.starts_with("fa017000-")), "{code}: {:?}", e.request_id());
    }
    assert_eq!(upstream.seen().len(), 1, "no injected call reached the upstream");
}

#[tokio::test]
async fn apply_then_timeout_is_an_sdk_timeout_and_reset_a_dispatch_or_response_failure() {
    let upstream = Upstream::start().await;
    // The attempt timeout must also cover the call reaching the proxy; the hold, far longer, is
    // what it times out on.
    let rules =
        vec![Rule::new(dynamodb::UPDATE_ITEM, 1.0, vec![Fault::ApplyThenTimeout { hold: Duration::from_secs(30) }])];
    let proxy = FaultProxy::start(upstream.addr, rules, 0).await.unwrap();
    let client = dynamodb_client(&proxy.url(), Some(Duration::from_secs(2)));
    let err = update(&client).await.expect_err("held");
    assert!(matches!(err, SdkError::TimeoutError(_)), "{err:?}");
    // Forwarded before the hold; polled, for scheduling.
    let deadline = Instant::now() + Duration::from_secs(20);
    while upstream.count(dynamodb::UPDATE_ITEM) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(upstream.count(dynamodb::UPDATE_ITEM), 1, "applied although the client timed out");

    proxy.set_rules(vec![Rule::new(dynamodb::UPDATE_ITEM, 1.0, vec![Fault::Reset])]).unwrap();
    let err = update(&client).await.expect_err("reset");
    assert!(matches!(err, SdkError::DispatchFailure(_) | SdkError::ResponseError(_)), "{err:?}");
    assert_eq!(upstream.count(dynamodb::UPDATE_ITEM), 1, "a reset call is not applied");
    proxy.shutdown().await;
}

#[tokio::test]
async fn kinesis_errors_become_typed_variants_or_carry_the_code() {
    let upstream = Upstream::start().await;
    let proxy = FaultProxy::start(upstream.addr, vec![], 0).await.unwrap();
    let client = kinesis_client(&proxy.url());
    let get_records = || client.get_records().shard_iterator("AAAA").send();

    type Check = fn(&GetRecordsError) -> bool;
    let unhandled: Check = |e| format!("{e:?}").starts_with("Unhandled");
    let cases: Vec<(Fault, u16, &str, Check)> = vec![
        (
            kinesis::provisioned_throughput_exceeded("clicks", "shardId-000000000000"),
            400,
            "ProvisionedThroughputExceededException",
            |e| matches!(e, GetRecordsError::ProvisionedThroughputExceededException(_)),
        ),
        (kinesis::internal_failure_exception(), 500, "InternalFailureException", |e| {
            matches!(e, GetRecordsError::InternalFailureException(_))
        }),
        // Not modelled for GetRecords: unhandled, with the bare code and the status.
        (kinesis::limit_exceeded("clicks"), 400, "LimitExceededException", unhandled),
        (kinesis::internal_failure(), 500, "InternalFailure", unhandled),
        (kinesis::service_unavailable(), 503, "ServiceUnavailable", unhandled),
    ];
    for (fault, status, code, check) in cases {
        proxy.set_rules(vec![Rule::new(kinesis::GET_RECORDS, 1.0, vec![fault.clone()])]).unwrap();
        let err = get_records().await.expect_err("the proxy answers with the error");
        let raw_status = match &err {
            aws_sdk_kinesis::error::SdkError::ServiceError(ctx) => ctx.raw().status().as_u16(),
            other => panic!("{code}: expected a service error, got {other:?}"),
        };
        assert_eq!(raw_status, status, "{code}");
        let e = err.into_service_error();
        assert!(check(&e), "{code}: got {e:?}");
        assert_eq!(aws_sdk_kinesis::error::ProvideErrorMetadata::code(&e), Some(code));
        assert_eq!(aws_sdk_kinesis::error::ProvideErrorMetadata::message(&e), Some(message(&fault).as_str()));
    }

    // ListShards models LimitExceededException.
    proxy.set_rules(vec![Rule::new(kinesis::LIST_SHARDS, 1.0, vec![kinesis::limit_exceeded("clicks")])]).unwrap();
    let e = client.list_shards().stream_name("clicks").send().await.expect_err("limited").into_service_error();
    assert!(matches!(e, ListShardsError::LimitExceededException(_)), "{e:?}");
    assert_eq!(upstream.seen().len(), 0);
    let stats = proxy.stats().matching(kinesis::TARGET_PREFIX);
    assert_eq!((stats.requests, stats.injected_total(), stats.forwarded), (6, 6, 0));
}
