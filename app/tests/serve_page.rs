//! `gather serve`'s live page at `/`, driven in headless Chromium (Debian's
//! `chromium`): opened on a measure, a grouping, filters and a window, it
//! fetches from the API, draws its chart and table; the DOM after its
//! scripts ran holds the same numbers the API answers, and a screenshot is
//! taken. Skipped without Chromium unless ZIGZAG_REQUIRE_EMULATORS=1
//! (`test.sh` installs it).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use zigzag_model::ScatterMode;
use zigzag_sqlite::SqliteTable;
use zigzag_testkit::fixture::{self, DAY, T0};
use zigzag_testkit::spawn_listening;

fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser"].into_iter().find(|c| {
        Command::new(c).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    });
    if found.is_none() {
        assert!(
            std::env::var("ZIGZAG_REQUIRE_EMULATORS").map_or(true, |v| v != "1"),
            "chromium is not installed (test.sh installs Debian's chromium)"
        );
        eprintln!("skipped: chromium not installed");
    }
    found
}

/// Headless Chromium on `url`, as a session on this closed network runs it.
fn headless(chromium: &str, profile: &std::path::Path, args: &[&str], url: &str) -> std::process::Output {
    Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=15000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .output()
        .unwrap()
}

fn get(addr: SocketAddr, path: &str) -> String {
    zigzag_testkit::http_get(addr, path).unwrap().1
}

/// The table cells the page rendered: group → value.
fn cells(dom: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let table = dom.split("<table id=\"table\">").nth(1).and_then(|t| t.split("</table>").next()).unwrap_or_default();
    for cell in table.split("data-group=\"").skip(1) {
        let group = cell.split('"').next().unwrap().to_string();
        let value = cell.split("data-value=\"").nth(1).and_then(|v| v.split('"').next()).unwrap().to_string();
        out.insert(group, value);
    }
    out
}

#[test]
fn the_live_page_shows_what_the_api_answers() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("zigzag.db");
    let config = fixture::config(4, ScatterMode::Random);
    tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
        fixture::write_recorded(&SqliteTable::open(&db).unwrap(), &config, &fixture::events(41, 3_000)).await;
    });
    let (_serve, addr) = spawn_listening(Command::new(env!("CARGO_BIN_EXE_gather")).arg("--db").arg(&db).args([
        "serve",
        "--listen",
        "127.0.0.1:0",
    ]))
    .unwrap();

    let (from, to) = ("2026-10-31T00:00:00Z", "2026-11-01T00:00:00Z");
    assert_eq!(T0 + DAY, 1_793_491_200_000, "the window is the fixture's first day");
    let page = format!(
        "http://{addr}/?metric=clicks&by=campaign&match=country%3D~%22DE%7CFR%22&from={from}&to={to}&step=1h&refresh=0"
    );
    let out = headless(chromium, &dir.path().join("profile"), &["--dump-dom"], &page);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(dom.contains("data-state=\"ready\""), "the page did not finish: {dom}");
    let shown = cells(&dom);
    assert_eq!(shown.len(), 4, "one row per campaign: {dom}");

    // The API's answer for the same window.
    let q = "sum by (campaign) (sum_over_time(clicks{country=~\"DE|FR\"}[1d]))";
    let path = format!(
        "/api/v1/query?query={}&time={}",
        form_urlencoded::byte_serialize(q.as_bytes()).collect::<String>(),
        (T0 + DAY) / 1000
    );
    let answer: serde_json::Value = serde_json::from_str(&get(addr, &path)).unwrap();
    let api: BTreeMap<String, String> = answer["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["metric"]["campaign"].as_str().unwrap().to_string(), r["value"][1].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(shown, api, "the page's table equals the API's answer");
    assert!(dom.contains("<polyline"), "a chart was drawn");
    assert!(dom.contains("read from projection"), "the page says what it read");

    let shot = dir.path().join("page.png");
    let out = headless(
        chromium,
        &dir.path().join("profile2"),
        &[&format!("--screenshot={}", shot.display()), "--window-size=1100,800"],
        &page,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "a screenshot of a drawn page ({} bytes)", png.len());
    if let Ok(keep) = std::env::var("ZIGZAG_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
}
