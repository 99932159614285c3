"""Write ``tidb_seed000.om``: TiDB/TiKV/PD/node-exporter samples for seed
000's cluster, in OpenMetrics text, for ``promtool tsdb create-blocks-from
openmetrics``.

Metric names, types and labels are those TiDB v8.5 components export and the
Grafana dashboards query (job names as tiup's Prometheus configuration sets
them; instances are the status ports of seed 000's topology). The values are
constructed, not captured (no TiDB runs here): counters grow at fixed,
documented rates so the self-test knows every answer exactly. The scenario
is seed 003's TPC-C paragraph: TiKV CPU saturated, TiDB at a quarter.

    python selftests/data/prometheus/make_tidb_openmetrics.py   # rewrites the .om file
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

START = 1763948400  # 2025-11-24T01:40:00Z, seed 000's display was taken at 01:43:29Z
STEP = 15  # tiup's default scrape interval
POINTS = 21  # 5 minutes
HOSTS_A = ("10.160.152.21", "10.160.152.22", "10.160.152.23")
HOSTS_B = ("172.24.40.17", "172.24.40.18", "172.24.40.19")
TIDB = tuple(f"{h}:10080" for h in HOSTS_A + HOSTS_B)
PD = tuple(f"{h}:2379" for h in HOSTS_A + HOSTS_B)
TIPROXY = tuple(f"{h}:6001" for h in HOSTS_A + HOSTS_B)
TIKV = ("10.160.152.24:20180", "172.24.40.20:20180")
NODES = tuple(f"{h}:9100" for h in HOSTS_A + HOSTS_B + ("10.160.152.24", "172.24.40.20"))
CORES = 8

#: cores per second of process CPU, by job and instance
CPU = {**{("tidb", i): 2.0 for i in TIDB}, **{("pd", i): 0.1 for i in PD},
       **{("tiproxy", i): 0.5 for i in TIPROXY},
       ("tikv", TIKV[0]): 7.6, ("tikv", TIKV[1]): 7.2}
TIKV_THREADS = {"grpc-server-0": 0.6, "grpc-server-1": 0.6, "raftstore-0": 0.9, "apply-0": 0.7,
                "unified-read-po-0": 1.2, "unified-read-po-1": 1.2, "sched-worker-pool-0": 0.8}
NET = {**{f"{h}:9100": (20e6, 25e6) for h in HOSTS_A + HOSTS_B},
       "10.160.152.24:9100": (50e6, 40e6), "172.24.40.20:9100": (48e6, 38e6)}


def lbl(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def counter(name: str, series: list[tuple[dict[str, str], float, float]], help_: str) -> Iterator[str]:
    """``series``: (labels, start value, rate per second)."""
    yield f"# HELP {name} {help_}"
    yield f"# TYPE {name} counter"
    for labels, base, rate in series:
        for k in range(POINTS):
            t = START + k * STEP
            yield f"{name}_total{lbl(**labels)} {base + rate * (t - START):.3f} {t}"


def histogram(name: str, series: list[tuple[dict[str, str], float, list[tuple[str, float]]]],
              help_: str) -> Iterator[str]:
    """``series``: (labels, events per second, [(le, cumulative share)]), le ascending, "+Inf" last."""
    yield f"# HELP {name} {help_}"
    yield f"# TYPE {name} histogram"
    for labels, rate, shares in series:
        for k in range(POINTS):
            t = START + k * STEP
            n = 1_000_000 + rate * (t - START)
            for le, share in shares:
                yield f"{name}_bucket{lbl(**labels, le=le)} {n * share:.3f} {t}"
            yield f"{name}_count{lbl(**labels)} {n:.3f} {t}"
            yield f"{name}_sum{lbl(**labels)} {n * 0.003:.3f} {t}"


QUERY_SHARES = [("0.001", 0.1), ("0.002", 0.5), ("0.004", 0.8), ("0.008", 0.9), ("0.016", 0.95),
                ("0.032", 0.99), ("0.064", 1.0), ("+Inf", 1.0)]
GET_SHARES = [("0.001", 0.5), ("0.002", 0.9), ("0.004", 0.99), ("0.008", 1.0), ("+Inf", 1.0)]
WRITE_SHARES = [("0.004", 0.5), ("0.008", 0.9), ("0.016", 0.99), ("0.032", 1.0), ("+Inf", 1.0)]
RAFT_SHARES = [("0.002", 0.5), ("0.004", 0.9), ("0.008", 0.99), ("0.016", 1.0), ("+Inf", 1.0)]
TSO_SHARES = [("0.0005", 0.5), ("0.001", 0.9), ("0.002", 0.99), ("0.004", 1.0), ("+Inf", 1.0)]


def lines() -> Iterator[str]:
    yield from counter("process_cpu_seconds", [({"instance": i, "job": j}, 5000.0, r) for (j, i), r in CPU.items()],
                       "Total user and system CPU time spent in seconds.")
    yield from counter("node_cpu_seconds", [({"cpu": str(c), "instance": n, "job": "overwritten-nodes",
                                              "mode": "idle"}, 90000.0, 0.5) for n in NODES for c in range(CORES)],
                       "Seconds the CPUs spent in each mode.")
    tidb_q = []
    for i in TIDB:
        tidb_q += [({"instance": i, "job": "tidb", "result": "OK", "type": "Select"}, 1e6, 1000.0),
                   ({"instance": i, "job": "tidb", "result": "OK", "type": "Commit"}, 2e5, 200.0),
                   ({"instance": i, "job": "tidb", "result": "Error", "type": "Select"}, 10.0, 0.5)]
    yield from counter("tidb_server_query", tidb_q, "Counter of queries.")
    stmts = [({"instance": i, "job": "tidb", "type": t}, 1e6, r) for i in TIDB for t, r in (("Select", 1000.0),
                                                                                          ("Update", 200.0))]
    yield from counter("tidb_executor_statement", stmts, "Counter of StmtNode.")
    yield from histogram("tidb_server_handle_query_duration_seconds",
                         [({"instance": i, "job": "tidb", "sql_type": "general"}, 1200.0, QUERY_SHARES)
                          for i in TIDB], "Bucketed histogram of processing time (s) of handled queries.")
    grpc = []
    for i in TIKV:
        grpc += [({"instance": i, "job": "tikv", "type": "kv_get"}, 3000.0, GET_SHARES),
                 ({"instance": i, "job": "tikv", "type": "kv_prewrite"}, 600.0, WRITE_SHARES),
                 ({"instance": i, "job": "tikv", "type": "kv_commit"}, 600.0, WRITE_SHARES),
                 ({"instance": i, "job": "tikv", "type": "kv_gc"}, 1.0, WRITE_SHARES)]
    yield from histogram("tikv_grpc_msg_duration_seconds", grpc, "Bucketed histogram of grpc server messages")
    yield from counter("tikv_thread_cpu_seconds", [({"instance": i, "job": "tikv", "name": n, "tid": str(k)}, 100.0, r)
                                                   for i in TIKV for k, (n, r) in enumerate(TIKV_THREADS.items())],
                       "Total user and system CPU time spent in seconds by threads.")
    yield from histogram("tikv_raftstore_commit_log_duration_seconds",
                         [({"instance": i, "job": "tikv"}, 1200.0, RAFT_SHARES) for i in TIKV],
                         "Bucketed histogram of peer commits logs duration.")
    yield from histogram("pd_client_cmd_handle_cmds_duration_seconds",
                         [({"instance": i, "job": "tidb", "type": "wait"}, 1400.0, TSO_SHARES) for i in TIDB],
                         "Bucketed histogram of processing time (s) of handled success cmds.")
    for metric, which in (("node_network_receive_bytes", 0), ("node_network_transmit_bytes", 1)):
        series = [({"device": "eth0", "instance": n, "job": "overwritten-nodes"}, 1e9, NET[n][which]) for n in NODES]
        series += [({"device": "lo", "instance": n, "job": "overwritten-nodes"}, 1e9, 1e9) for n in NODES]
        yield from counter(metric, series, "Network device statistic.")
    yield "# EOF"


if __name__ == "__main__":
    out = Path(__file__).with_name("tidb_seed000.om")
    out.write_text("\n".join(lines()) + "\n")
    print(f"wrote {out}")
