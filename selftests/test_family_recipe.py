"""The recipe for a new family in docs/architecture.md, followed to the
letter, both ways it can be taken, each on a real lab:

* from outside the package: its blocks (the contract, the fixtures, the
  hook) become a ``conftest.py`` beside the test file in an empty
  directory, run twice;
* in the checkout: the same blocks become ``wanbench/workloads/ping.py``,
  ``fixtures/ping.py`` and ``tests/ping/test_ping.py`` of a copy of the
  checkout, with the one line the recipe adds to ``BUILT_IN``.

Either way the new family's cells are counted, recorded (results JSON with
its table, its terminal block), judged by the gate with its own metric and
kept as a baseline, with nothing else of wanbench edited."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from selftests.labutil import free_port_base, needs
from wanbench.profiles.lab.servers import Lab

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
pytestmark = [pytest.mark.lab, pytest.mark.slow]
#: the in-tree route's one change to the registry: after this line of wanbench/families.py
BUILT_IN_OPENS = "BUILT_IN: tuple[str, ...] = (\n"
#: what the contract's block says to write in the checkout
IN_TREE_FIXTURES = ('fixtures=None,  # in the checkout: "wanbench.fixtures.ping"', 'fixtures="wanbench.fixtures.ping",')


def recipe_blocks(text: str) -> dict[str, str]:
    """``<!-- recipe: NAME -->`` followed by a fenced python block: NAME -> the block."""
    return dict(re.findall(r"<!-- recipe: (\S+) -->\s*```python\n(.*?)```", text, flags=re.S))


def test_the_document_holds_the_recipe() -> None:
    blocks = recipe_blocks(DOC.read_text())
    assert set(blocks) == {"family", "fixtures", "test_ping.py", "hook", "built-in"}
    assert "pytest_wanbench_families" in blocks["hook"]
    assert IN_TREE_FIXTURES[0] in blocks["family"]
    assert BUILT_IN_OPENS in (ROOT / "wanbench" / "families.py").read_text()


def _need_lab_tools() -> None:
    needs("mariadbd", "haproxy")


def _pytest(cwd: Path, lab: Path, base: int, store: Path, *more: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "--strict-markers",
           "--lab-dir", str(lab), "--lab-port-base", str(base), "--concurrency", "1,4", "--rounds", "2",
           "--baseline-dir", str(store), *more]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, check=False, env=env)


def _check_first_run(first: subprocess.CompletedProcess[str], results: Path, store: Path) -> None:
    __tracebackhide__ = True
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert "cell 1 of 2: test_ping[c1]" in first.stdout  # progress counts the new family's cells
    assert "wanbench ping: round trips per second" in first.stdout  # its block (Family.summary)
    doc = json.loads(results.read_text())
    cells = doc["results"]
    assert [c["family"] for c in cells] == ["ping", "ping"]
    assert [c["concurrency"] for c in cells] == [1, 4]
    assert all(c["qps"] > 0 and c["verdict"]["status"] == "no-baseline" for c in cells)
    assert [r["clients"] for r in doc["tables"]["ping"]] == [1, 4]  # its table (Family.tables)
    assert doc["run"]["params"].get("ping_queries") is None  # the default: not in the fingerprint
    (saved,) = store.glob("lab-*.json")
    stored = json.loads(saved.read_text())["runs"][0]["cells"]
    assert all(len(c["samples"]["slowest_ms"]) == 2 for c in stored.values())  # its metric, per round


def _check_second_run(second: subprocess.CompletedProcess[str]) -> None:
    __tracebackhide__ = True
    verdicts = re.findall(r"^\[([a-z-]+)\] select1 ping=- c=", second.stdout, flags=re.M)
    assert len(verdicts) == 2, second.stdout[-3000:]
    assert "no-baseline" not in verdicts, second.stdout[-3000:]  # judged against the stored run


def test_a_family_built_from_the_recipe_alone_runs_records_and_is_gated(tmp_path: Path) -> None:
    """From outside the package: a conftest.py and a test file in an empty directory."""
    _need_lab_tools()
    here = tmp_path / "family"
    here.mkdir()
    blocks = recipe_blocks(DOC.read_text())
    (here / "conftest.py").write_text("\n\n".join([blocks["family"], blocks["fixtures"], blocks["hook"]]))
    (here / "test_ping.py").write_text(blocks["test_ping.py"])
    base = free_port_base(24100, 24300, span=8)
    store, results, lab = tmp_path / "store", tmp_path / "results.json", tmp_path / "lab"
    try:
        first = _pytest(here, lab, base, store, "test_ping.py", "--baseline-save", "--results-json", str(results))
        _check_first_run(first, results, store)
        second = _pytest(here, lab, base, store, "test_ping.py")
        _check_second_run(second)
        other = _pytest(here, lab, base, store, "test_ping.py", "--ping-queries", "50")
        assert other.returncode == 0, other.stdout[-3000:]
        assert "incomparable" in other.stdout  # --ping-queries fingerprints the run (Family.fingerprint_unless)
    finally:
        Lab(lab, base).down()
    assert not [p.name for p in here.iterdir() if p.name not in ("conftest.py", "test_ping.py", ".benchmarks",
                                                                   "__pycache__")]


#: what of the checkout a copy needs to run the suite (bin/: the lab's toxiproxy-server, linked)
COPIED = ("wanbench", "fixtures", "tests", "conftest.py", "pytest.ini", "pyproject.toml", "setup.py")


def checkout_copy(dest: Path) -> Path:
    """A copy of the checkout that imports its own ``wanbench`` (``python -m pytest`` puts the
    working directory first on ``sys.path``), with ``wanbench.fixtures`` where the wheel has it."""
    dest.mkdir()
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dest / name)
    (dest / "wanbench" / "fixtures").symlink_to(dest / "fixtures", target_is_directory=True)
    (dest / "bin").symlink_to(ROOT / "bin", target_is_directory=True)
    return dest


def test_a_built_in_family_added_by_the_recipe_runs_records_and_is_gated(tmp_path: Path) -> None:
    """In the checkout: the family's module, its fixtures, its tests and one line in BUILT_IN."""
    _need_lab_tools()
    copy = checkout_copy(tmp_path / "checkout")
    blocks = recipe_blocks(DOC.read_text())
    old, new = IN_TREE_FIXTURES
    (copy / "wanbench" / "workloads" / "ping.py").write_text(blocks["family"].replace(old, new))
    (copy / "fixtures" / "ping.py").write_text(blocks["fixtures"])
    (copy / "tests" / "ping").mkdir()
    (copy / "tests" / "ping" / "__init__.py").write_text("")
    (copy / "tests" / "ping" / "test_ping.py").write_text(blocks["test_ping.py"])
    registry = copy / "wanbench" / "families.py"
    registry.write_text(registry.read_text().replace(BUILT_IN_OPENS, BUILT_IN_OPENS + blocks["built-in"], 1))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([sys.executable, "-c", "import wanbench.fixtures.ping as m; print(m.__file__)"],
                           cwd=copy, env=env, capture_output=True, text=True, check=True, timeout=60)
    assert where.stdout.strip().startswith(str(copy)), where.stdout  # the copy's wanbench, not the checkout's
    base = free_port_base(24100, 24300, span=8)
    store, results, lab = tmp_path / "store", tmp_path / "results.json", tmp_path / "lab"
    try:
        first = _pytest(copy, lab, base, store, "tests/ping", "--baseline-save", "--results-json", str(results),
                        env=env)
        _check_first_run(first, results, store)
        markers = subprocess.run([sys.executable, "-m", "pytest", "--markers", "-p", "no:randomly"], cwd=copy,
                                 env=env, capture_output=True, text=True, timeout=120, check=True)
        assert "@pytest.mark.ping: SELECT 1 round trips" in markers.stdout
        _check_second_run(_pytest(copy, lab, base, store, "tests/ping", env=env))
    finally:
        Lab(lab, base).down()
