use super::*;
use zigzag_model::Config;

fn cat() -> Catalog {
    Catalog::new(Config::shipped()).unwrap()
}

fn q(text: &str) -> Result<Query> {
    compile(&parse(text)?, &cat())
}

fn refused(text: &str, says: &str) {
    match q(text) {
        Err(e @ ServeError::Unsupported(_)) => assert!(e.to_string().contains(says), "{text}: {e}"),
        other => panic!("{text}: expected a refusal saying {says:?}, got {other:?}"),
    }
}

#[test]
fn a_merge_aggregation_is_pushed_into_the_read() {
    let query = q("sum by (campaign) (clicks{country=\"DE\"})").unwrap();
    assert_eq!(query.leaves.len(), 1);
    let leaf = &query.leaves[0];
    assert_eq!(leaf.group, ["campaign"], "read grouped by campaign only");
    assert_eq!(leaf.range_ms, 60_000);
    assert_eq!(leaf.filters.predicates[0].op, Op::Eq("DE".into()));
    let query = q("sum without (country, referrer) (sum_over_time(cost[1h]))").unwrap();
    assert_eq!(query.leaves[0].group, ["campaign"]);
    assert_eq!((query.leaves[0].func, query.leaves[0].range_ms), (OverTime::Sum, 3_600_000));
    assert_eq!(q("min by (country) (cost_min)").unwrap().leaves[0].group, ["country"]);
}

#[test]
fn other_aggregations_read_every_dimension() {
    let all = cat().dims;
    for text in ["count by (campaign) (clicks)", "max by (campaign) (clicks)", "sum(last_over_time(clicks[5m]))"] {
        assert_eq!(q(text).unwrap().leaves[0].group, all, "{text}");
    }
    assert_eq!(q("clicks").unwrap().leaves[0].group, all);
    assert!(q("clicks").unwrap().leaves[0].keeps_name);
    assert!(!q("sum_over_time(clicks[5m])").unwrap().leaves[0].keeps_name);
}

#[test]
fn matchers_become_filters() {
    let leaf = |t: &str| q(t).unwrap().leaves.remove(0);
    assert_eq!(leaf("clicks{country=~\"DE|FR\"}").filters.predicates[0].op, Op::In(vec!["DE".into(), "FR".into()]));
    assert!(matches!(leaf("clicks{country=~\"D.\"}").filters.predicates[0].op, Op::Matches(_)));
    assert!(matches!(leaf("clicks{country!~\"D.\"}").filters.predicates[0].op, Op::NotMatches(_)));
    assert_eq!(leaf("clicks{country!=\"DE\"}").filters.predicates[0].op, Op::Ne("DE".into()));
    assert!(leaf("clicks{colour=\"red\"}").empty, "a label no series has");
    assert!(!leaf("clicks{colour=\"\"}").empty && leaf("clicks{colour=\"\"}").filters.is_empty());
    assert_eq!(leaf("{__name__=\"impressions\"}").metric, Metric::Measure("impressions".into()));
    assert_eq!(leaf("clicks offset 1h").offset_ms, 3_600_000);
}

#[test]
fn a_range_of_any_length_is_the_buckets_ending_in_it() {
    let query = q("sum_over_time(clicks[75577s])").unwrap();
    assert_eq!(query.leaves[0].range_ms, 75_577_000, "Grafana's $__range under Today so far");
    assert!(q("sum_over_time(clicks[90s])").is_ok());
}

#[test]
fn refusals_say_what_to_write_instead() {
    refused("rate(clicks[5m])", "sum_over_time(clicks[5m])");
    refused("increase(clicks[1h])", "not a running total");
    refused("sum by (campaign) (ctr)", "sum by (...) (clicks) / sum by (...) (impressions)");
    refused("sum_over_time(ctr[1h])", "sum_over_time(clicks[..]) / sum_over_time(impressions[..])");
    refused("clicks[5m]", "sum_over_time(clicks[5m])");
    refused("max_over_time(sum(clicks)[1h:5m])", "subqueries");
    refused("clicks @ 1700000000", "@ modifier");
    refused("requests", "the metrics are clicks, impressions");
    refused("{__name__=~\"c.*\"}", "select one by name");
    refused(
        "histogram_quantile(0.9, clicks)",
        "clicks is not a quantile measure; write histogram_quantile(0.99, sum by",
    );
    refused("histogram_quantile(1.5, clicks)", "q must be in 0..=1");
    refused("label_replace(clicks, \"a\", \"b\", \"c\", \"d\")", "not in gather serve's PromQL subset");
    refused("count_values(\"x\", clicks)", "count_values is not");
    assert!(matches!(parse("sum(("), Err(ServeError::BadData(_))));
    assert!(matches!(parse(""), Err(ServeError::BadData(_))));
}

#[test]
fn literal_alternations_narrow_and_the_rest_match() {
    assert_eq!(literal_alternatives("a|b|a"), Some(vec!["a".into(), "b".into()]));
    assert_eq!(literal_alternatives("a.b"), None);
    assert_eq!(literal_alternatives("DE"), Some(vec!["DE".into()]));
}
