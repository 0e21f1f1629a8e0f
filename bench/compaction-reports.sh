#!/usr/bin/env bash
# Used by BENCHMARKS.md ("Compaction"): run from a directory holding z.db.
# The README's four reports on October data, each with --explain; prints
# one line per report: name, projection, queries, requests, RCU.
B=$HOME/.cache/zigzag-target/release
G=("$B/gather" --db z.db)
run() {
  local name=$1; shift
  out=$("${G[@]}" "$@" --explain 2>&1)
  proj=$(echo "$out" | grep -m1 "^source:\|source:" | sed 's/.*projection \([a-z_]*\).*/\1/')
  q=$(echo "$out" | awk '/^actual/{a=1} a&&/queries:/{print $2; exit}')
  r=$(echo "$out" | awk '/^actual/{a=1} a&&/requests:/{print $2; exit}')
  rcu=$(echo "$out" | awk '/^actual/{a=1} a&&/RCU:/{print $2; exit}')
  c=$(echo "$out" | grep -m1 "compacted:" | sed 's/ *compacted: \([0-9]*\).*/\1/')
  echo "| $name | $proj | $q | $r | $rcu | ${c:-0} |"
}
run "totals by country, 1 day" totals --from 2026-10-02 --to 2026-10-03 --group-by country
run "clicks every 5 min, 6 h" timeseries --from 2026-10-02T06:00:00Z --to 2026-10-02T12:00:00Z --step 5m
run "top referrers by CTR, country=DE, 1 day" top --from 2026-10-02 --to 2026-10-03 --group-by referrer --where country=DE --by ctr
run "ratios by campaign, 1 week" ratios --from 2026-10-01 --to 2026-10-08 --group-by campaign
run "clicks per minute, 1 day" timeseries --from 2026-10-02 --to 2026-10-03 --step 1m
