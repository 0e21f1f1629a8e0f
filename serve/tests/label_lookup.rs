//! Label values and series without `start`: over all the data the table
//! keeps, as Prometheus answers; a label's values from the value catalog
//! ingest writes, the rest (matchers, series, a table whose catalog is
//! partial) from the coarsest complete buckets of the span the statistics
//! say its items cover. Each answer equals the events'.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use serde_json::Value as Json;
use std::collections::BTreeSet;
use std::sync::Arc;
use tower::ServiceExt;
use zigzag_core::table::{MemoryTable, SortedTable, UpdateRequest};
use zigzag_gather::execute::ExecOptions;
use zigzag_model::Config;
use zigzag_serve::{router, Catalog, Engine, Limits, Server, ServerOptions};
use zigzag_testkit::fixture::{self, Event};

async fn get(app: &Router, uri: &str) -> Json {
    let res = app.clone().oneshot(Request::get(uri).body(Body::empty()).unwrap()).await.unwrap();
    let status = res.status();
    let json: Json = serde_json::from_slice(&axum::body::to_bytes(res.into_body(), 1 << 24).await.unwrap()).unwrap();
    assert_eq!(status, StatusCode::OK, "{uri}: {json}");
    json
}

fn strings(json: &Json) -> BTreeSet<String> {
    json["data"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
}

fn infos(json: &Json) -> String {
    json["infos"].as_array().map(|a| format!("{a:?}")).unwrap_or_default()
}

/// The shipped layout written as ingest writes it, its layout recorded
/// (`whole`: by a writer of the catalog, or not), and the API over it.
async fn served(events: &[Event], whole: bool) -> Router {
    let config = Config::shipped();
    let table = MemoryTable::new();
    if !whole {
        // A layout recorded by a writer from before the catalog.
        let layout = zigzag_model::layout::Layout::of(&config);
        let stored = zigzag_model::versions::load(&table).await.unwrap();
        assert!(stored.is_none());
        let req = UpdateRequest::new(zigzag_model::layout::LAYOUT_PK, zigzag_model::layout::LAYOUT_SK.to_vec())
            .set("layout", layout.canonical().as_str())
            .set("digest", layout.digest().as_str());
        table.update(&req).await.unwrap();
    }
    fixture::write_recorded(&table, &config, events).await;
    let engine = Engine::new(Arc::new(table), Catalog::new(config).unwrap(), ExecOptions::default(), Limits::default());
    router(Server::new(Arc::new(engine), ServerOptions::default()))
}

#[tokio::test]
async fn label_values_without_start_are_every_value_the_table_keeps_from_the_catalog() {
    let events = fixture::events(7, 2_000);
    for whole in [true, false] {
        let app = served(&events, whole).await;
        for (label, of) in [("referrer", fixture::Field::Referrer), ("country", fixture::Field::Country)] {
            let answer = get(&app, &format!("/api/v1/label/{label}/values")).await;
            let want: BTreeSet<String> = events.iter().map(|e| e.value(of).to_string()).collect();
            assert_eq!(strings(&answer), want, "{label} (catalog whole: {whole})");
            let said = infos(&answer);
            match whole {
                true => assert!(said.contains("from its value catalog"), "{said}"),
                false => assert!(said.contains("all the data the table keeps") && !said.contains("catalog"), "{said}"),
            }
        }
        // A matcher: the values of the series it selects, over all the data.
        let answer = get(&app, "/api/v1/label/referrer/values?match%5B%5D=clicks%7Bcountry%3D%22DE%22%7D").await;
        let want: BTreeSet<String> =
            events.iter().filter(|e| e.country == "DE").map(|e| e.referrer.to_string()).collect();
        assert_eq!(strings(&answer), want, "referrers of DE (catalog whole: {whole})");
        assert!(infos(&answer).contains("read from projection referrer_country"), "{}", infos(&answer));
        // Up to an end: the data before it only (the hours it touches).
        let end = fixture::T0 + 3 * fixture::HOUR + 1_000;
        let answer = get(&app, &format!("/api/v1/label/campaign/values?end={}", end / 1000)).await;
        let want: BTreeSet<String> =
            events.iter().filter(|e| e.t < end / 60_000 * 60_000 + 60_000).map(|e| e.campaign.to_string()).collect();
        assert_eq!(strings(&answer), want, "campaigns up to {end}");
    }
}

#[tokio::test]
async fn series_without_start_are_every_label_set_a_projection_keeps() {
    let events = fixture::events(9, 1_500);
    let app = served(&events, true).await;
    let answer = get(&app, "/api/v1/series?match%5B%5D=clicks%7Bcampaign%3D%22x%22%7D").await;
    let got: BTreeSet<(String, String)> = answer["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["campaign"].as_str().unwrap().to_string(), s["country"].as_str().unwrap().to_string()))
        .collect();
    let want: BTreeSet<(String, String)> =
        events.iter().filter(|e| e.campaign == "x").map(|e| ("x".to_string(), e.country.to_string())).collect();
    assert_eq!(got, want, "projection cc's series of campaign x: {answer}");
    assert!(answer["data"].as_array().unwrap().iter().all(|s| s["__name__"] == "clicks"));
}
