"""The probe engine: slap-style read and write probes on sysbench, the
workload of most fault scenarios (``read_probe``/``write_probe``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from wanbench.errors import ConfigError
from wanbench.results import Round, WorkloadResult
from wanbench.workloads import EngineContext
from wanbench.workloads.sysbench import PROBE_KINDS, SysbenchRunner

#: queries per round when --queries is not given (the seed used 100000
#: reads and 1000 writes per mysqlslap iteration; these keep a lab run short)
DEFAULT_QUERIES = {"read": 20000, "write": 2000}


def make_runner(cluster: Any, path: str, workdir: Path) -> SysbenchRunner:
    """A sysbench runner on ``path``: round robin over every endpoint the
    cluster lists for it, with the profile's workload settings."""
    targets = cluster.sql_targets(path)
    first = targets[0]
    return SysbenchRunner(host=first.host, port=first.port, user=first.credentials.user,
                          password=first.credentials.password, database=first.database,
                          workdir=workdir, extra_args=cluster.workload_args(path),
                          more_endpoints=[(t.host, t.port) for t in targets[1:]], cpus=cluster.client_cpus())


class ProbeEngine:
    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self._runners: dict[str, SysbenchRunner] = {}

    def sysbench_runner(self, path: str) -> SysbenchRunner:
        """One prepared runner per path (``proxy``/``direct``), made on first use."""
        if path not in self._runners:
            runner = make_runner(self.ctx.cluster, path, self.ctx.workdir / "probe" / path)
            runner.prepare_probe()
            self._runners[path] = runner
        return self._runners[path]

    def runner(self, variant: str, path: str) -> Callable[[int], WorkloadResult]:
        if variant not in PROBE_KINDS:
            raise ConfigError(f"probe workload must be read or write, not {variant!r}")
        ctx = self.ctx
        runner = self.sysbench_runner(path)
        queries = ctx.option("queries") or DEFAULT_QUERIES[variant]
        rounds = ctx.option("rounds")
        timeout = ctx.option("round_timeout")
        cap = ctx.option("round_cap")

        def run(concurrency: int) -> WorkloadResult:
            def on_round(i: int, rnd: Round) -> None:
                ctx.progress(f"  round {i}/{rounds}: {rnd.queries} queries in {rnd.seconds:.2f}s = "
                             f"{rnd.qps:.0f} QPS, p95 {rnd.latency_ms.p95:.2f} ms")
                with ctx.step(f"round {i}: {rnd.qps:.0f} QPS, p95 {rnd.latency_ms.p95:.2f} ms"):
                    pass

            # One short warm-up round (a fifth of the queries), not counted: caches,
            # connections and the fault's queues settle before measuring.
            runner.window_hooks = None  # the warm-up is not measured
            with ctx.step("warm up"):
                runner.probe(variant, concurrency=concurrency, queries=max(2 * concurrency, queries // 5), rounds=1,
                             timeout=timeout, max_seconds=cap / 5 if cap else None)
            runner.window_hooks = ctx.window()
            try:
                return runner.probe(variant, concurrency=concurrency, queries=queries, rounds=rounds,
                                    timeout=timeout, on_round=on_round, max_seconds=cap)
            finally:
                runner.window_hooks = None

        return run
