//! The core conformance suite against DynamoDB Local (deploy/local/up.sh):
//! the store must behave like the in-memory and SQLite stores wherever the
//! query strategies and the flush protocol depend on it.

use std::time::{SystemTime, UNIX_EPOCH};
use zigzag_core::table::SortedTable;
use zigzag_dynamodb::{client, ensure_table, Billing, DynamoTable, Ensured};

fn unique(name: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{name}-{}-{nanos}", std::process::id())
}

async fn local_client() -> aws_sdk_dynamodb::Client {
    let opts = zigzag_aws::emulator::options("DYNAMODB").unwrap_or_else(|e| panic!("{e}"));
    client(&opts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_local_passes_the_conformance_suite() {
    if !zigzag_aws::emulator::gate("dynamodb_local_passes_the_conformance_suite") {
        return;
    }
    let client = local_client().await;
    let name = unique("conformance");
    assert_eq!(ensure_table(&client, &name, Billing::OnDemand, true).await.unwrap(), Ensured::Created);
    assert_eq!(ensure_table(&client, &name, Billing::OnDemand, false).await.unwrap(), Ensured::Existed);
    let table = DynamoTable::new(client, &name);
    // DynamoDB Local reports 0 RCU for a Query that reads nothing, where
    // DynamoDB charges the 0.5 RCU minimum; reports only under-count by that.
    if let Err(failures) = zigzag_core::table::conformance::run_except(&table, "ns", &["capacity-empty"]).await {
        panic!("{failures}");
    }
    let cap = table.capacity();
    assert!(cap.requests > 50, "every call is counted: {cap:?}");
    assert!(cap.read_units > 0.0 && cap.write_units > 0.0, "DynamoDB Local reports consumed capacity: {cap:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_tables_and_foreign_schemas_are_refused() {
    if !zigzag_aws::emulator::gate("missing_tables_and_foreign_schemas_are_refused") {
        return;
    }
    let client = local_client().await;
    let missing = unique("missing");
    let err = ensure_table(&client, &missing, Billing::OnDemand, false).await.unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");

    // A table someone else made with a string sort key.
    let foreign = unique("foreign");
    use aws_sdk_dynamodb::types::*;
    client
        .create_table()
        .table_name(&foreign)
        .attribute_definitions(
            AttributeDefinition::builder().attribute_name("pk").attribute_type(ScalarAttributeType::S).build().unwrap(),
        )
        .attribute_definitions(
            AttributeDefinition::builder().attribute_name("sk").attribute_type(ScalarAttributeType::S).build().unwrap(),
        )
        .key_schema(KeySchemaElement::builder().attribute_name("pk").key_type(KeyType::Hash).build().unwrap())
        .key_schema(KeySchemaElement::builder().attribute_name("sk").key_type(KeyType::Range).build().unwrap())
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
    let err = ensure_table(&client, &foreign, Billing::OnDemand, true).await.unwrap_err();
    assert!(err.to_string().contains("another key schema"), "{err}");

    let provisioned = unique("provisioned");
    ensure_table(&client, &provisioned, Billing::Provisioned { read_units: 7, write_units: 3 }, true).await.unwrap();
    let desc = client.describe_table().table_name(&provisioned).send().await.unwrap().table.unwrap();
    let pt = desc.provisioned_throughput.unwrap();
    assert_eq!((pt.read_capacity_units, pt.write_capacity_units), (Some(7), Some(3)));
    let table = DynamoTable::new(client, &provisioned);
    table.put(zigzag_core::table::Item::new("p", vec![1])).await.unwrap();
    assert!(table.get("p", &[1]).await.unwrap().is_some());
}
