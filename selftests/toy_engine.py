"""A toy workload engine: what a new engine module needs, and nothing else
(used by selftests/test_engines.py)."""

from __future__ import annotations

from collections.abc import Callable

from wanbench.results import Latency, Round, WorkloadResult
from wanbench.workloads import EngineContext


class ToyEngine:
    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx

    def runner(self, variant: str, path: str) -> Callable[[int], WorkloadResult]:
        self.ctx.progress(f"toy: prepared {variant} on {path}")

        def run(concurrency: int) -> WorkloadResult:
            rounds = tuple(Round(seconds=1.0, queries=100 * concurrency, qps=100.0 * concurrency, tps=float("nan"),
                                 latency_ms=Latency(avg=1.0)) for _ in range(int(self.ctx.option("rounds"))))
            return WorkloadResult(workload=f"toy_{variant}", concurrency=concurrency, rounds=rounds,
                                  latency_ms=Latency(avg=1.0))

        return run
