"""The lab's CPU layout: the plan, the pinning of what it starts, and of
the load generator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from wanbench.errors import InfrastructureError
from wanbench.procs import pinned
from wanbench.profiles.lab import running
from wanbench.profiles.lab.layout import CpuLayout
from wanbench.profiles.lab.servers import Lab

TWO_CPUS = len(os.sched_getaffinity(0)) >= 2


def allowed(pid: int) -> set[int]:
    return set(os.sched_getaffinity(pid))


@pytest.mark.parametrize(
    ("cpus", "server", "client"),
    [([0, 1], (1,), (0,)), ([0, 1, 2, 3], (2, 3), (0, 1)), ([0, 1, 2], (1, 2), (0,)), ([4, 6], (6,), (4,))],
)
def test_split_gives_the_servers_the_upper_half(cpus: list[int], server: tuple[int, ...],
                                                client: tuple[int, ...]) -> None:
    layout = CpuLayout.plan("split", cpus)
    assert (layout.name, layout.server, layout.client) == ("split", server, client)
    assert CpuLayout.from_json(layout.to_json()) == layout
    assert "SQL servers on CPU" in layout.describe()


def test_one_cpu_or_shared_means_no_pinning() -> None:
    assert CpuLayout.plan("split", [0]) == CpuLayout("shared")
    assert CpuLayout.plan("shared", [0, 1, 2, 3]) == CpuLayout("shared")
    assert CpuLayout.from_json(None) == CpuLayout("shared")  # a lab started before layouts existed
    with pytest.raises(InfrastructureError, match="unknown lab CPU layout 'half'"):
        CpuLayout.plan("half", [0, 1])
    with pytest.raises(InfrastructureError, match="known: split, shared"):
        Lab(cpu_layout="half")


@pytest.mark.skipif(not TWO_CPUS, reason="needs two CPUs")
def test_pinned_confines_a_child_and_nothing_else() -> None:
    code = "import os; print(sorted(os.sched_getaffinity(0)))"
    out = subprocess.run([sys.executable, "-c", code], preexec_fn=pinned([1]), capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[1]"
    assert len(os.sched_getaffinity(0)) >= 2, "the parent must stay unpinned"
    assert pinned(()) is None


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.skipif(not TWO_CPUS, reason="needs two CPUs")
def test_split_lab_pins_every_thread_and_repin_moves_them(tmp_path: Path) -> None:
    with Lab(tmp_path / "lab", 23480, "split") as lab:
        layout = lab.cpu_layout
        assert layout.name == "split"
        assert running.status(lab)["cpus"] == layout.to_json()
        for service in ("primary", "replica", "toxiproxy", "haproxy"):
            handle = lab.handle(service)
            assert handle is not None
            want = set(layout.server if service in ("primary", "replica") else layout.client)
            threads = [int(t.name) for t in Path(f"/proc/{handle.pid}/task").iterdir()]
            assert threads
            assert all(allowed(t) == want for t in threads), (service, [allowed(t) for t in threads])
        shared = running.repin(lab, "shared")
        assert shared == CpuLayout("shared")
        assert lab.cpu_layout == shared
        primary = lab.handle("primary")
        assert primary is not None
        assert allowed(primary.pid) == set(os.sched_getaffinity(0))
