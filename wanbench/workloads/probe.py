"""The probe engine: slap-style read and write probes on sysbench, the
workload of most fault scenarios (``read_probe``/``write_probe``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from wanbench import ab
from wanbench.errors import ConfigError
from wanbench.interleave import Switch, run_interleaved
from wanbench.results import Round, WorkloadResult
from wanbench.workloads import EngineContext
from wanbench.workloads.loadhosts import LoadHosts, session_load_hosts
from wanbench.workloads.sysbench import PROBE_KINDS, SysbenchRunner
from wanbench.workloads.sysbench_output import merge_results

#: queries per round when --queries is not given (the seed used 100000
#: reads and 1000 writes per mysqlslap iteration; these keep a lab run short)
DEFAULT_QUERIES = {"read": 20000, "write": 2000}


def make_runner(cluster: Any, path: str, workdir: Path) -> SysbenchRunner:
    """A sysbench runner on ``path``: round robin over every endpoint the
    cluster lists for it, with the profile's workload settings."""
    targets = cluster.sql_targets(path)
    first = targets[0]
    return SysbenchRunner(host=first.host, port=first.port, user=first.user,
                          password=first.password, database=first.database,
                          workdir=workdir, extra_args=cluster.workload_args(path),
                          more_endpoints=[(t.host, t.port) for t in targets[1:]], cpus=cluster.client_cpus())


class ProbeEngine:
    #: can draw its load from several hosts (``--load-hosts``)
    load_hosts = True
    #: can alternate its rounds between a candidate and a baseline cluster (``--ab``, ``wanbench.ab``)
    ab = True

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self._runners: dict[str, SysbenchRunner] = {}
        hosts = session_load_hosts(ctx.cluster, ctx.option)
        self._hosts = (LoadHosts(hosts, accept_new_host_keys=bool(ctx.option("ssh_accept_new_hosts")))
                       if hosts else None)

    def close(self) -> None:
        if self._hosts is not None:
            self._hosts.close()

    def sysbench_runner(self, path: str, side: str = "candidate") -> SysbenchRunner:
        """One prepared runner per path (``proxy``/``direct``) and side (an A/B
        run's ``baseline`` on its own cluster), made on first use."""
        key = path if side == "candidate" else f"{side}/{path}"
        if key not in self._runners:
            cluster = self.ctx.baseline if side == "baseline" else self.ctx.cluster
            runner = make_runner(cluster, path, self.ctx.workdir / ("probe" if side == "candidate" else
                                                                    f"probe-{side}") / path)
            runner.prepare_probe()
            self._runners[key] = runner
        return self._runners[key]

    def runner(self, variant: str, path: str) -> Callable[[int], WorkloadResult]:
        if variant not in PROBE_KINDS:
            raise ConfigError(f"probe workload must be read or write, not {variant!r}")
        ctx = self.ctx
        runner = self.sysbench_runner(path)
        # an A/B run: the baseline's runner, its data prepared now too (before any fault)
        other = self.sysbench_runner(path, "baseline") if ctx.baseline is not None else None
        queries = ctx.option("queries") or DEFAULT_QUERIES[variant]
        rounds = ctx.option("rounds")
        timeout = ctx.option("round_timeout")
        cap = ctx.option("round_cap")
        extra = int(ctx.option("probe_extra_round_trips") or 0)
        pad = int(ctx.option("probe_extra_bytes") or 0)
        reads = int(ctx.option("probe_extra_reads") or 0)

        def on_round(i: int, rnd: Round, *, total: int = rounds, side: str = "") -> None:
            tail = f" ({side})" if side else ""
            ctx.progress(f"  round {i}/{total}{tail}: {rnd.queries} queries in {rnd.seconds:.2f}s = "
                         f"{rnd.qps:.0f} QPS, p95 {rnd.latency_ms.p95:.2f} ms")
            with ctx.step(f"round {i}{tail}: {rnd.qps:.0f} QPS, p95 {rnd.latency_ms.p95:.2f} ms"):
                pass

        if self._hosts is not None:
            if extra or pad or reads:
                raise ConfigError("--probe-extra-round-trips, --probe-extra-bytes and --probe-extra-reads are "
                                  "calibration handicaps of "
                                  "the local load generator; they do not apply to --load-hosts")
            return self._remote_runner(self._hosts, runner, variant, on_round)

        def run(concurrency: int) -> WorkloadResult:
            # One short warm-up round (a fifth of the queries), not counted: caches,
            # connections and the fault's queues settle before measuring. It runs the preflight;
            # the measured rounds after it, at the same concurrency, do not (check=False).
            for r in (runner, other) if other is not None else (runner,):
                r.window_hooks = None  # the warm-up is not measured
                with ctx.step("warm up" if r is runner else "warm up (baseline)"):
                    r.probe(variant, concurrency=concurrency, queries=max(2 * concurrency, queries // 5), rounds=1,
                            timeout=timeout, max_seconds=cap / 5 if cap else None)
            window = ctx.window()
            switch = ctx.interleave()
            if other is not None:
                return sides(concurrency, switch or _same_faults, window, other)
            if switch is not None:
                return interleaved(concurrency, switch, window)
            runner.window_hooks = window
            try:
                return runner.probe(variant, concurrency=concurrency, queries=queries, rounds=rounds,
                                    timeout=timeout, on_round=on_round, max_seconds=cap,
                                    extra_round_trips=extra, extra_bytes=pad,
                                    extra_reads=reads, check=False)
            finally:
                runner.window_hooks = None

        def interleaved(concurrency: int, switch: Switch, window: Any) -> WorkloadResult:
            """ABBA: each faulted round beside a level-0 round; only the
            faulted rounds' windows reach the evidence (the census counts them)."""

            def one(faulted: bool, i: int, total: int) -> WorkloadResult:
                runner.window_hooks = window if faulted else None
                part = runner.probe(variant, concurrency=concurrency, queries=queries, rounds=1, timeout=timeout,
                                    max_seconds=cap, extra_round_trips=extra, extra_bytes=pad,
                                    extra_reads=reads, check=False)
                on_round(i, part.rounds[0], total=total, side="fault" if faulted else "level 0")
                return part

            try:
                return run_interleaved(rounds, switch, one, merge_results).result()
            finally:
                runner.window_hooks = None

        def sides(concurrency: int, switch: Switch, window: Any, other: SysbenchRunner) -> WorkloadResult:
            """A/B: each candidate round beside a baseline round (ABBA), each side's
            windows to its own cluster's evidence. The calibration handicaps
            (--probe-extra-*) make the candidate's load generator do more: the
            baseline's does what the probe does."""
            other_window = ctx.baseline_window()

            def one(candidate: bool, i: int, total: int) -> WorkloadResult:
                runner.window_hooks = window if candidate else None
                other.window_hooks = None if candidate else other_window
                if candidate:
                    part = runner.probe(variant, concurrency=concurrency, queries=queries, rounds=1, timeout=timeout,
                                        max_seconds=cap, extra_round_trips=extra, extra_bytes=pad,
                                        extra_reads=reads, check=False)
                else:
                    part = other.probe(variant, concurrency=concurrency, queries=queries, rounds=1, timeout=timeout,
                                       max_seconds=cap, check=False)
                on_round(i, part.rounds[0], total=total, side="candidate" if candidate else "baseline")
                return part

            try:
                return run_interleaved(rounds, switch, one, merge_results, key=ab.KEY, other=ab.OTHER).result()
            finally:
                runner.window_hooks = other.window_hooks = None

        return run

    def _remote_runner(self, hosts: LoadHosts, runner: SysbenchRunner, variant: str,
                       on_round: Callable[[int, Round], None]) -> Callable[[int], WorkloadResult]:
        """Rounds drawn from the load hosts: each a ``--duration`` window on all
        of them at once, after a fifth of that (at least 1 s) not counted."""
        ctx = self.ctx
        rounds = ctx.option("rounds")
        timeout = ctx.option("round_timeout")
        seconds = float(ctx.option("duration"))

        ignored = [o for o, v in (("--queries", ctx.option("queries")), ("--round-cap", ctx.option("round_cap"))) if v]

        def run(concurrency: int) -> WorkloadResult:
            ctx.progress(f"  {concurrency} threads over {len(hosts.hosts)} load hosts "
                         f"({', '.join(hosts.labels())}), {seconds:g}s per round (--duration)"
                         + (f"; {' and '.join(ignored)} do not apply to load hosts" if ignored else ""))
            runner.window_hooks = None  # the warm-up is not measured
            with ctx.step("warm up (all load hosts)"):
                hosts.probe(runner, variant, concurrency=concurrency, seconds=max(1.0, seconds / 5), rounds=1,
                            timeout=timeout)
            runner.window_hooks = ctx.window()
            try:
                result = hosts.probe(runner, variant, concurrency=concurrency, seconds=seconds, rounds=rounds,
                                     timeout=timeout, on_round=on_round)
            finally:
                runner.window_hooks = None
            record = result.extra["load_hosts"]
            for h in record["hosts"]:
                ctx.progress(f"  load host {h['host']}: {h['threads']} threads, {_num(h['qps'], '.0f')} QPS, "
                             f"p95 {_num(h['latency_ms']['p95'], '.2f')} ms, sysbench busy "
                             f"{_num(h['client'].get('busy_cores'), '.2f')} of {h['client'].get('cores', '?')} cores")
                if h["client"].get("saturated"):
                    ctx.progress(f"  load host {h['host']}: {h['client']['message']}")
            ctx.progress(f"  start skew between load hosts: {record['max_start_skew_ms']} ms")
            return result

        return run


def _same_faults(candidate: bool) -> None:
    """An A/B cell's sides are two clusters, each under the level's fault: nothing to toggle."""


def _num(value: float | None, spec: str) -> str:
    return "?" if value is None or value != value else format(value, spec)
