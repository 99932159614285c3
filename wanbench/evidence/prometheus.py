"""Prometheus: the TiDB cluster's own, and the lab's optional one.

``PromClient`` is a small HTTP client of the Prometheus query API (instant
queries at the end of a measurement window, with the window as the range).

``tidb_evidence`` asks a TiDB cluster's Prometheus the questions the Grafana
panels answer ("TiDB Query Summary", "TiKV Details", "Node Exporter"): CPU per
instance (``process_cpu_seconds_total`` by job/instance), TiDB QPS
(``tidb_server_query_total``) and statements (``tidb_executor_statement_total``),
query duration (``tidb_server_handle_query_duration_seconds``), TiKV gRPC rate
and duration (``tikv_grpc_msg_duration_seconds``), TiKV thread-pool CPU
(``tikv_thread_cpu_seconds_total``), the Raft wait
(``tikv_raftstore_commit_log_duration_seconds``: propose to commit, i.e. waiting
for the followers), PD TSO wait (``pd_client_cmd_handle_cmds_duration_seconds``)
and NIC bytes (``node_network_*_bytes_total``). The result has the same shape
as the lab's (``wanbench.evidence.collect``) so one finding serves both.

``LabPrometheus`` starts Debian's ``prometheus``, ``prometheus-node-exporter``
and two ``prometheus-mysqld-exporter`` on loopback for the lab (ports
base+10..base+13, data in the lab's run directory), by PID like every lab
process, never the system services.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wanbench.errors import InfrastructureError
from wanbench.evidence.tidb_metrics import SELECTORS, census_counters, census_promql
from wanbench.procs import ProcessHandle, find_binary, log_tail, port_free, spawn
from wanbench.wait import wait_for

P_PROMETHEUS, P_NODE_EXPORTER, P_MYSQLD_EXPORTER_PRIMARY, P_MYSQLD_EXPORTER_REPLICA = 10, 11, 12, 13
SCRAPE_INTERVAL = "1s"


class PromClient:
    """Instant queries against one Prometheus (``url`` like http://host:9090)."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: Mapping[str, str]) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as resp:  # noqa: S310 - http(s) URL of the user's Prometheus
                body = json.loads(resp.read().decode())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise InfrastructureError(f"Prometheus {self.url}: HTTP {exc.code} for {params}: {detail}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise InfrastructureError(f"Prometheus {self.url} not reachable: {exc}") from None
        if body.get("status") != "success":
            raise InfrastructureError(f"Prometheus {self.url}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=self.timeout) as resp:  # noqa: S310
                return resp.status == 200
        except (urllib.error.URLError, OSError) as exc:
            raise InfrastructureError(f"Prometheus {self.url} not ready: {exc}") from None

    def query(self, expr: str, at: float) -> list[tuple[dict[str, str], float]]:
        """An instant vector at unix time ``at``: (labels, value) pairs."""
        data = self._get("/api/v1/query", {"query": expr, "time": f"{at:.3f}"})
        if data.get("resultType") != "vector":
            raise InfrastructureError(f"Prometheus {self.url}: {expr!r} gave a {data.get('resultType')}")
        out = []
        for item in data["result"]:
            out.append((dict(item["metric"]), float(item["value"][1])))
        return out


def find_prometheus(topology: Any, override: str | None = None) -> str | None:
    """The cluster's Prometheus URL: ``override`` (``--prometheus``), else the
    topology's prometheus component (tiup's monitoring_servers, or the
    display's prometheus row)."""
    if override:
        return override.rstrip("/")
    for c in getattr(topology, "components", ()):
        if c.role == "prometheus":
            return f"http://{c.host}:{c.port}"
    return None


def _rng(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


#: TiDB's Prometheus job name -> the component name the finding uses
TIDB_JOBS = ("tidb", "tikv", "pd", "tiproxy")


def tidb_queries(window_s: float) -> dict[str, str]:
    """The PromQL behind each evidence item, for a window of ``window_s``."""
    w = _rng(window_s)
    return {
        "cpu": f'sum by (job, instance) (rate(process_cpu_seconds_total{{job=~"{"|".join(TIDB_JOBS)}"}}[{w}]))',
        "host_cores": 'count by (instance) (node_cpu_seconds_total{mode="idle"})',
        "tidb_qps": f'sum by (instance) (rate(tidb_server_query_total{{result="OK"}}[{w}]))',
        "tidb_statements": f"sum by (type) (rate(tidb_executor_statement_total[{w}]))",
        # users' statements only: TiDB's own SQL (sql_type="internal", every build since v4) left out, as
        # the Performance Overview dashboard does (the TiDB dashboard's Duration panel includes it)
        "tidb_p95": ("histogram_quantile(0.95, sum by (le, instance) "
                     f'(rate(tidb_server_handle_query_duration_seconds_bucket{{sql_type!="internal"}}[{w}])))'),
        "tidb_p99": ("histogram_quantile(0.99, sum by (le) "
                     f'(rate(tidb_server_handle_query_duration_seconds_bucket{{sql_type!="internal"}}[{w}])))'),
        "tikv_grpc_qps": f'sum by (instance) (rate(tikv_grpc_msg_duration_seconds_count{{type!="kv_gc"}}[{w}]))',
        "tikv_grpc_p99": ("histogram_quantile(0.99, sum by (le, type) "
                          f'(rate(tikv_grpc_msg_duration_seconds_bucket{{type!="kv_gc"}}[{w}])))'),
        "tikv_thread_cpu": f"sum by (instance, name) (rate(tikv_thread_cpu_seconds_total[{w}]))",
        "raft_commit_p99": ("histogram_quantile(0.99, sum by (le) "
                            f"(rate(tikv_raftstore_commit_log_duration_seconds_bucket[{w}])))"),
        "pd_tso_wait_p99": ("histogram_quantile(0.99, sum by (le) "
                            f'(rate(pd_client_cmd_handle_cmds_duration_seconds_bucket{{type="wait"}}[{w}])))'),
        "net_rx": f'sum by (instance) (rate(node_network_receive_bytes_total{{device!="lo"}}[{w}]))',
        "net_tx": f'sum by (instance) (rate(node_network_transmit_bytes_total{{device!="lo"}}[{w}]))',
        **census_queries(window_s),
    }


def census_queries(window_s: float) -> dict[str, str]:
    """The census counters' PromQL (``census.<counter>:<metric>``) for a window of ``window_s``: the
    selectors ``wanbench.evidence.tidb_metrics`` reads from tidb-server's own ``/metrics``."""
    return {f"census.{k}": v for k, v in census_promql(_rng(window_s)).items()}


def _host(instance: str) -> str:
    return instance.rsplit(":", 1)[0]


def host_links(rx: Mapping[str, float], tx: Mapping[str, float]) -> dict[str, dict[str, int]]:
    """NIC bytes per second by host (loopback devices excluded by the query). A host named by a
    loopback address (the TiDB lab) is left out: its components talk over ``lo``, so its other
    devices' bytes are some other program's, not the cluster's."""
    def loopback(host: str) -> bool:
        try:
            return ipaddress.ip_address(host.strip("[]")).is_loopback
        except ValueError:
            return host == "localhost"

    return {f"host {h}": {"in_bytes_per_s": round(rx.get(h, 0.0)), "out_bytes_per_s": round(tx.get(h, 0.0))}
            for h in sorted(set(rx) | set(tx)) if not loopback(h)}


def _pool(thread: str) -> str:
    """TiKV thread name -> its pool (``grpc-server-0`` -> ``grpc-server``)."""
    return re.sub(r"[-_]?\d+$", "", thread) or thread


def _ms(x: float) -> float | None:
    return None if x != x or x in (float("inf"), float("-inf")) else round(x * 1000.0, 3)  # NaN check


def tidb_evidence(client: PromClient, start: float, end: float) -> dict[str, Any]:
    """Evidence of the window [start, end] (unix seconds) from TiDB's metrics,
    in the lab evidence's shape: components (CPU), cpu_sets (one per host),
    qps per tier, latency_ms, links (NIC bytes per host)."""
    window = end - start
    q = tidb_queries(window)
    ev: dict[str, Any] = {"window_s": round(window, 3), "windows": 1, "source": f"prometheus {client.url}",
                          "queries": q}
    cores = {_host(m["instance"]): int(v) for m, v in client.query(q["host_cores"], end)}
    comps: dict[str, Any] = {}
    by_host: dict[str, list[str]] = {}
    for m, v in client.query(q["cpu"], end):
        name = f"{m.get('job', '?')}@{m.get('instance', '?')}"
        host = _host(m.get("instance", "?"))
        n = cores.get(host)
        comps[name] = {"cpu_cores": round(v, 3), "role": m.get("job"), "host": host, "host_cores": n,
                       "cpu_pct": round(100.0 * v / n, 1) if n else None}
        by_host.setdefault(host, []).append(name)
    ev["components"] = comps
    ev["cpu_sets"] = {
        f"host {h}": {"cpus": list(range(cores[h])) if h in cores else [],
                      "busy_pct": None,
                      "ours_pct": round(100.0 * sum(comps[n]["cpu_cores"] for n in members) / cores[h], 1)
                      if cores.get(h) else None,
                      "members": members}
        for h, members in sorted(by_host.items())
    }
    qps: dict[str, Any] = {}
    tidb = client.query(q["tidb_qps"], end)
    if tidb:
        qps["tidb"] = round(sum(v for _m, v in tidb), 1)
        qps["tidb_by_instance"] = {m["instance"]: round(v, 1) for m, v in tidb}
    grpc = client.query(q["tikv_grpc_qps"], end)
    if grpc:
        qps["tikv_grpc"] = round(sum(v for _m, v in grpc), 1)
        qps["tikv_grpc_by_instance"] = {m["instance"]: round(v, 1) for m, v in grpc}
    stmts = client.query(q["tidb_statements"], end)
    if stmts:
        qps["tidb_statements_by_type"] = {m.get("type", "?"): round(v, 1) for m, v in stmts}
    ev["qps"] = qps
    lat: dict[str, Any] = {}
    for key, label in (("tidb_p99", "tidb.query_p99"), ("raft_commit_p99", "tikv.raft_commit_log_p99"),
                       ("pd_tso_wait_p99", "pd.tso_wait_p99")):
        res = client.query(q[key], end)
        value = _ms(res[0][1]) if res else None
        if value is not None:
            lat[label] = value
    p95 = {m["instance"]: _ms(v) for m, v in client.query(q["tidb_p95"], end)}
    if p95:
        lat["tidb.query_p95_by_instance"] = p95
    grpc_p99 = {m.get("type", "?"): _ms(v) for m, v in client.query(q["tikv_grpc_p99"], end)}
    if grpc_p99:
        lat["tikv.grpc_p99_by_type"] = grpc_p99
    ev["latency_ms"] = lat
    pools: dict[str, dict[str, float]] = {}
    for m, v in client.query(q["tikv_thread_cpu"], end):
        inst = pools.setdefault(m.get("instance", "?"), {})
        pool = _pool(m.get("name", "?"))
        inst[pool] = round(inst.get(pool, 0.0) + v, 3)
    if pools:
        ev["tikv_thread_cpu_cores"] = pools
    ev["links"] = host_links({_host(m["instance"]): v for m, v in client.query(q["net_rx"], end)},
                             {_host(m["instance"]): v for m, v in client.query(q["net_tx"], end)})
    samples: list[tuple[str, dict[str, str], float]] = []
    for key, expr in q.items():
        if not key.startswith("census."):
            continue
        metric = key.split(":", 1)[1]
        by = next((sel.by for sel in SELECTORS if f"census.{sel.counter}:{sel.metric}" == key), "")
        for labels, value in client.query(expr, end):
            samples.append((metric, {by: labels.get(by, "")} if by else {}, value))
    counters = census_counters(samples)
    if counters:  # the census's work per operation on TiDB (wanbench.census), as rates
        ev["counters_per_s"] = {"tidb": {k: round(v, 3) for k, v in counters.items()}}
    return ev


# -- the lab's own Prometheus ---------------------------------------------------------------------
@dataclass(frozen=True)
class LabPrometheus:
    """Prometheus + node exporter + one mysqld exporter per lab server; for
    the TiDB lab (``tidb_status_port`` set) Prometheus scrapes tidb-server's
    own ``/metrics`` as job ``tidb``, as a tiup cluster's Prometheus does, and
    no mysqld exporter runs."""

    run_dir: Path
    port_base: int
    tidb_status_port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port_base + P_PROMETHEUS}"

    SERVICES = ("prometheus", "node_exporter", "mysqld_exporter_primary", "mysqld_exporter_replica")

    @property
    def services(self) -> tuple[str, ...]:
        return self.SERVICES[:2] if self.tidb_status_port else self.SERVICES

    def _pid_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def running(self) -> dict[str, bool]:
        return {s: bool((h := ProcessHandle.load(self._pid_file(s))) and h.alive()) for s in self.services}

    def config_text(self) -> str:
        targets: dict[str, int] = {"node": self.port_base + P_NODE_EXPORTER}
        if self.tidb_status_port:
            targets["tidb"] = self.tidb_status_port
        else:
            targets["mysqld_primary"] = self.port_base + P_MYSQLD_EXPORTER_PRIMARY
            targets["mysqld_replica"] = self.port_base + P_MYSQLD_EXPORTER_REPLICA
        jobs = "".join(
            f"  - job_name: {job}\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
            for job, port in targets.items()
        )
        return (f"global:\n  scrape_interval: {SCRAPE_INTERVAL}\n  evaluation_interval: {SCRAPE_INTERVAL}\n"
                f"scrape_configs:\n{jobs}")

    def up(self, sockets: Mapping[str, Path], password: str, *, cpus: tuple[int, ...] = ()) -> None:
        """Start the stack (``sockets``: server -> MariaDB UNIX socket); the
        exporters log in as root over the socket, given in their environment."""
        offsets = (P_PROMETHEUS, P_NODE_EXPORTER) + (() if self.tidb_status_port else (P_MYSQLD_EXPORTER_PRIMARY,
                                                                                         P_MYSQLD_EXPORTER_REPLICA))
        ports = [self.port_base + p for p in offsets]
        busy = [p for p in ports if not port_free(p)]
        if busy:
            raise InfrastructureError(f"the lab's Prometheus ports {busy} on 127.0.0.1 are in use")

        prom = find_binary("prometheus", "/usr/bin/prometheus")
        node = find_binary("prometheus-node-exporter", "/usr/bin/prometheus-node-exporter")
        d = self.run_dir / "prometheus"
        (d / "data").mkdir(parents=True, exist_ok=True)
        (d / "prometheus.yml").write_text(self.config_text())
        spawn("node_exporter", [node, f"--web.listen-address=127.0.0.1:{self.port_base + P_NODE_EXPORTER}",
                                "--collector.disable-defaults", "--collector.cpu", "--collector.stat",
                                "--collector.netdev", "--collector.meminfo", "--collector.loadavg"],
              log=self.run_dir / "node_exporter.log", pid_file=self._pid_file("node_exporter"), cpus=cpus)
        exporters = () if self.tidb_status_port else (("primary", P_MYSQLD_EXPORTER_PRIMARY),
                                                      ("replica", P_MYSQLD_EXPORTER_REPLICA))
        for server, offset in exporters:
            mysqld = find_binary("prometheus-mysqld-exporter", "/usr/bin/prometheus-mysqld-exporter")
            env = dict(os.environ)
            env["DATA_SOURCE_NAME"] = f"root:{password}@unix({sockets[server]})/"
            spawn(f"mysqld_exporter_{server}",
                  [mysqld, f"--web.listen-address=127.0.0.1:{self.port_base + offset}"],
                  log=self.run_dir / f"mysqld_exporter_{server}.log",
                  pid_file=self._pid_file(f"mysqld_exporter_{server}"), env=env, cpus=cpus)
        spawn("prometheus", [prom, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'data'}",
                             f"--web.listen-address=127.0.0.1:{self.port_base + P_PROMETHEUS}",
                             "--storage.tsdb.retention.time=1d"],
              log=self.run_dir / "prometheus.log", pid_file=self._pid_file("prometheus"), cpus=cpus)
        client = PromClient(self.url, timeout=2)
        wait_for(client.ready, what=f"the lab's Prometheus on {self.url}", timeout=30,
                 transient=(InfrastructureError,), hint=f"log: {log_tail(self.run_dir / 'prometheus.log')}")

    def down(self) -> list[str]:
        done = []
        for s in reversed(self.SERVICES):
            h = ProcessHandle.load(self._pid_file(s))
            if h and h.stop(timeout=10):
                done.append(f"stopped {s} pid {h.pid}")
            self._pid_file(s).unlink(missing_ok=True)
        return done

    def lab_queries(self, window_s: float) -> dict[str, str]:
        w = _rng(window_s)
        return {
            "node_cpu_busy": f'sum by (cpu) (rate(node_cpu_seconds_total{{mode!~"idle|iowait"}}[{w}]))',
            "questions": f"sum by (job) (rate(mysql_global_status_questions[{w}]))",
            "bytes_sent": f"sum by (job) (rate(mysql_global_status_bytes_sent[{w}]))",
            "semi_sync_tx_wait_us": ("sum by (job) (rate(mysql_global_status_rpl_semi_sync_master_tx_wait_time"
                                     f"[{w}])) / sum by (job) (rate(mysql_global_status_rpl_semi_sync_master_tx_waits"
                                     f"[{w}]))"),
        }

    def evidence(self, start: float, end: float) -> dict[str, Any]:
        """What the lab's Prometheus saw over [start, end] (unix seconds)."""
        client = PromClient(self.url)
        out: dict[str, Any] = {"url": self.url}
        for key, expr in self.lab_queries(end - start).items():
            label = "cpu" if key == "node_cpu_busy" else "job"
            out[key] = {m.get(label, "?"): round(v, 3) for m, v in client.query(expr, end) if v == v}
        return out
