#!/usr/bin/env python3
"""Dashboard viewers against `gather serve`: each viewer refreshes the
shipped Grafana dashboard (deploy/grafana/dashboards/zigzag.json) every
--refresh seconds for --seconds, sending what Grafana sends (the time range
resolved from the dashboard's `now-24h` .. `now`, $__range substituted,
instant targets at the range's end, range targets with start and end
aligned down to the panel's 5m step, form POSTs), at one fixed `now`, or
with --moving at the clock of each refresh (as Grafana does: both ends of
the range move every refresh), and reports each query's
latency (p50, p99) and the errors, and from the server's /metrics what the
run cost the table: read units (RCU, as DynamoDB reported them) and
requests per minute, and the time slices served from the cache. Standard
library only; loopback only.

  python3 bench/serve/viewers.py --url http://127.0.0.1:9090 --viewers 10 --seconds 60 --now 2026-11-21T00:00:00Z
"""
import argparse
import datetime
import json
import os
import statistics
import threading
import time
import urllib.parse
import urllib.request

HOUR = 3600


def resolve(now, text, up):
    """Grafana's now[-Nh][/h] for the dashboard's range (hours only)."""
    t = now
    rest = text[len("now"):]
    if rest.startswith("-"):
        n = rest[1:].split("/")[0]
        assert n.endswith("h"), n
        t -= int(n[:-1]) * HOUR
    if rest.endswith("/h"):
        down = t // HOUR * HOUR
        t = down + HOUR if up and down != t else down
    return t


def requests_of(dashboard, now, country):
    frm = resolve(now, dashboard["time"]["from"], False)
    to = resolve(now, dashboard["time"]["to"], True)
    rng = f"{to - frm}s"
    out = []
    # The panels over gather serve (the server row reads a Prometheus).
    for panel in (p for p in dashboard["panels"] if p.get("datasource", {}).get("uid") == "zigzag"):
        for target in panel["targets"]:
            expr = target["expr"].replace("$__range", rng).replace("$country", country)
            if target.get("instant"):
                out.append((panel["title"], "/api/v1/query", {"query": expr, "time": to}))
            else:
                step = 300
                out.append((panel["title"], "/api/v1/query_range",
                            {"query": expr, "start": frm // step * step, "end": to // step * step, "step": step}))
    return out


def viewer(url, reqs_at, refresh, until, lat, errors, lock):
    while time.monotonic() < until:
        began = time.monotonic()
        for title, path, form in reqs_at():
            body = urllib.parse.urlencode(form).encode()
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(urllib.request.Request(url + path, data=body), timeout=30) as r:
                    ok = json.load(r).get("status") == "success"
            except Exception:  # noqa: BLE001 - an error is counted, the run goes on
                ok = False
            ms = (time.perf_counter() - t0) * 1000
            with lock:
                lat.append((title, ms))
                errors[0] += 0 if ok else 1
        time.sleep(max(0.0, refresh - (time.monotonic() - began)))


def scrape(url):
    """(read units, read requests, cache hits, cache reads) so far, from /metrics."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            text = r.read().decode()
    except Exception:  # noqa: BLE001 - a server without /metrics: nothing to say
        return None
    out = [0.0, 0.0, 0.0, 0.0, {}]
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        if name.startswith("zigzag_dynamodb_consumed_capacity_micro_total") and 'kind="read"' in name:
            out[0] += float(value) / 1e6
        elif name.startswith("zigzag_dynamodb_requests_total") and 'kind="read"' in name:
            out[1] += float(value)
        elif name.startswith("zigzag_serve_cache_slices_total") and 'result="hit"' in name:
            out[2] += float(value)
        elif name.startswith("zigzag_serve_cache_slices_total") and 'result="read"' in name:
            out[3] += float(value)
        elif name.startswith("zigzag_serve_table_reads_total") and 'shared="no"' in name:
            part = name.split('partition="')[1].split('"')[0]
            out[4][part] = out[4].get(part, 0.0) + float(value)
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="http://127.0.0.1:9090")
    p.add_argument("--viewers", type=int, default=1)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--refresh", type=float, default=5)
    p.add_argument("--now", help="the dashboard's clock (RFC 3339; default: now)")
    p.add_argument("--moving", action="store_true", help="the clock moves: each refresh asks at its own now")
    p.add_argument("--country", default="DE")
    p.add_argument("--dashboard", default=os.path.join(here, "../../deploy/grafana/dashboards/zigzag.json"))
    a = p.parse_args()
    assert a.url.startswith("http://127.0.0.1") or a.url.startswith("http://localhost"), "loopback only"
    now = int(datetime.datetime.fromisoformat(a.now.replace("Z", "+00:00")).timestamp()) if a.now else int(time.time())
    dashboard = json.load(open(a.dashboard))
    started = time.time()

    def reqs_at():
        t = now + int(time.time() - started) if a.moving else now
        return requests_of(dashboard, t, a.country)
    lat, errors, lock = [], [0], threading.Lock()
    before, t_before = scrape(a.url), time.monotonic()
    until = time.monotonic() + a.seconds
    threads = [threading.Thread(target=viewer, args=(a.url, reqs_at, a.refresh, until, lat, errors, lock))
               for _ in range(a.viewers)]
    for t in threads:
        t.start()
        time.sleep(a.refresh / max(1, a.viewers))  # viewers out of phase, as real ones are
    for t in threads:
        t.join()
    def summary(ms):
        ms = sorted(ms)
        p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
        return f"p50={statistics.median(ms):.1f}ms p99={p99:.1f}ms max={ms[-1]:.1f}ms"

    after, minutes = scrape(a.url), (time.monotonic() - t_before) / 60
    print(f"viewers={a.viewers} queries={len(lat)} errors={errors[0]} {summary([m for _, m in lat])}")
    if before and after:
        d = [y - x for x, y in zip(before[:4], after[:4])]
        hit = d[2] / max(1.0, d[2] + d[3])
        print(f"  table: {d[0] / minutes:.1f} RCU/min, {d[1] / minutes:.1f} read requests/min; "
              f"cache: {d[2]:.0f} slices from memory, {d[3]:.0f} read ({hit:.1%} hits)")
        sent = {k: (v - before[4].get(k, 0.0)) / minutes for k, v in sorted(after[4].items())}
        print("  queries sent per minute, by partition: " + ", ".join(f"{k} {v:.1f}" for k, v in sent.items()))
    for title in dict.fromkeys(t for t, _ in lat):
        print(f"  {title}: {summary([m for t, m in lat if t == title])}")


if __name__ == "__main__":
    main()
