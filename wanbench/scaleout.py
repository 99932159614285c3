"""Several clusters in one run: which clusters, which CPUs, which worker owns which.

``pytest -n N`` with N clusters (``--cluster a.yaml --cluster b.yaml`` or
``--labs N``) gives each pytest-xdist worker one cluster. This module is the
plan, without pytest: what the clusters are called, where each lab lives
(run directory, port block), which CPUs each worker and everything it starts
may use, and whether a baseline recorded on one cluster may judge another.
``wanbench/pytest_plugin/scaleout.py`` wires it into pytest and xdist.

Equivalence: the labs of ``--labs N`` are equivalent by construction. A lab
is built afresh for every invocation (new data directory, new processes), so
the baseline store already treats "a lab on this machine" as one environment
across runs; the labs of one run differ from each other in nothing more than
their port numbers and run directory, and each gets a CPU set of the same
size. ``--cluster`` files describe real clusters (other hosts, other links):
they are equivalent only when the user says so (``--cluster-equivalent``).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wanbench.errors import ConfigError

#: ports between the bases of two labs of one run (a lab uses base..base+13: its
#: servers and links, then its Prometheus and exporters at base+10..13)
LAB_PORT_STRIDE = 20


@dataclass(frozen=True)
class Member:
    """One cluster of the run and the worker that owns it."""

    index: int  # 0-based; worker gwK starts with cluster K
    name: str  # lab1, lab2, ... or the cluster name of the file
    file: str | None = None  # --cluster FILE
    lab_dir: str | None = None  # --labs: this lab's run directory
    port_base: int | None = None  # --labs: this lab's first port
    cpus: tuple[int, ...] = ()  # () = not pinned

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "index": self.index}
        if self.file is not None:
            out["file"] = self.file
        if self.port_base is not None:
            out["port_base"] = self.port_base
        out["cpus"] = list(self.cpus)
        return out


@dataclass(frozen=True)
class ClusterPlan:
    """The clusters of a run. One member is today's run, unchanged."""

    kind: str  # "lab" or "file"
    members: tuple[Member, ...]
    equivalent: bool  # may a baseline of one member judge another?

    @property
    def several(self) -> bool:
        return len(self.members) > 1

    def member(self, index: int) -> Member:
        if not 0 <= index < len(self.members):
            raise ConfigError(f"no cluster {index}: this run has {len(self.members)} "
                              f"({', '.join(m.name for m in self.members)})")
        return self.members[index]

    def describe(self) -> str:
        parts = []
        for m in self.members:
            where = m.file or f"{m.lab_dir}, ports {m.port_base}..{(m.port_base or 0) + 13}"
            cpus = f", CPU {','.join(map(str, m.cpus))}" if m.cpus else ", CPUs shared"
            parts.append(f"{m.name} ({where}{cpus})")
        eq = "equivalent" if self.equivalent else "not equivalent: each has its own baselines"
        return f"{len(self.members)} clusters, {eq}: " + "; ".join(parts)


def split_cpus(available: Collection[int], n: int) -> list[tuple[int, ...]]:
    """``n`` disjoint CPU sets of equal size, or ``n`` empty sets (shared) when
    the machine has fewer CPUs than clusters. Leftover CPUs (5 CPUs, 2 sets)
    stay unused, so every set has the same size."""
    cpus = sorted(available)
    if n < 2 or len(cpus) < n:
        return [() for _ in range(n)]
    size = len(cpus) // n
    return [tuple(cpus[i * size:(i + 1) * size]) for i in range(n)]


def lab_dir_of(base_dir: str | os.PathLike[str], index: int) -> str:
    """Lab 1 keeps the run directory of a one-lab run; lab K its own beside it (``lab-K``)."""
    base = Path(base_dir)
    return str(base if index == 0 else base.with_name(f"{base.name}-{index + 1}"))


def plan_clusters(
    files: Sequence[str] | None,
    labs: int | None,
    *,
    lab_dir: str | os.PathLike[str],
    port_base: int,
    equivalent: bool = False,
    cpus: Collection[int] = (),
    cluster_names: Sequence[str] | None = None,
) -> ClusterPlan:
    """The run's clusters from ``--cluster`` (repeatable), ``--labs`` and
    ``--cluster-equivalent``. ``cluster_names`` are the names inside the
    files (read by the caller, which knows the profiles); without them the
    file names stand in. Raises ``ConfigError`` for what cannot work."""
    files = list(files or ())
    if files and labs is not None:
        raise ConfigError("--labs starts embedded labs; --cluster names clusters to use: give one or the other")
    if labs is not None and labs < 1:
        raise ConfigError(f"--labs {labs}: at least one lab")
    if files:
        resolved = [str(Path(f).expanduser().resolve()) for f in files]
        twice = sorted({f for f in files if resolved.count(str(Path(f).expanduser().resolve())) > 1})
        if twice:
            raise ConfigError(f"--cluster {', '.join(twice)} given twice: each cluster can be measured by one "
                              "worker only")
        names = list(cluster_names) if cluster_names is not None else [Path(f).stem for f in files]
        if len(names) != len(files):
            raise ConfigError("internal: one cluster name per --cluster file")
        same = sorted({n for n in names if names.count(n) > 1})
        if same:
            raise ConfigError(f"several --cluster files describe the cluster {', '.join(same)}: one cluster "
                              "cannot be measured by two workers at once")
        if equivalent and len(files) < 2:
            raise ConfigError("--cluster-equivalent needs two or more --cluster files")
        sets = split_cpus(cpus, len(files))
        members = tuple(Member(i, names[i], file=f, cpus=sets[i]) for i, f in enumerate(files))
        return ClusterPlan("file", members, equivalent=equivalent or len(files) == 1)
    n = labs or 1
    if equivalent:
        raise ConfigError("--cluster-equivalent is for --cluster files: the labs of --labs are equivalent "
                          "by construction")
    sets = split_cpus(cpus, n)
    members = tuple(
        Member(i, f"lab{i + 1}", lab_dir=lab_dir_of(lab_dir, i), port_base=port_base + i * LAB_PORT_STRIDE,
               cpus=sets[i])
        for i in range(n)
    )
    return ClusterPlan("lab", members, equivalent=True)


def check_workers(plan: ClusterPlan, numprocesses: int | None, dist: str | None) -> None:
    """``-n`` must equal the number of clusters, and only wanbench's own
    scheduling keeps a scenario's levels on one cluster."""
    n = len(plan.members)
    if not plan.several:
        return
    flag = "--labs" if plan.kind == "lab" else "--cluster"
    if not numprocesses:
        raise ConfigError(f"{n} clusters ({flag}) need -n {n}: one pytest-xdist worker per cluster")
    if numprocesses != n:
        raise ConfigError(f"-n {numprocesses} with {n} clusters ({flag}): give -n {n}, one worker per cluster")
    if dist not in (None, "no", "load", "loadgroup"):
        raise ConfigError(f"--dist {dist}: with several clusters wanbench schedules the cells itself (each "
                          "scenario's levels on one worker and its cluster, each level applied once for its "
                          "whole block of concurrencies); leave --dist out")


__all__ = ["LAB_PORT_STRIDE", "ClusterPlan", "Member", "check_workers", "lab_dir_of", "plan_clusters", "split_cpus"]
