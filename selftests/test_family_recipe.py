"""The recipe for a new family in docs/architecture.md, followed to the
letter: its two files are copied out of the document into an empty
directory and run, twice, on a real lab. The new family's cells are counted,
recorded (results JSON with its table, evidence), judged by the gate and
kept as a baseline, with nothing of wanbench edited."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from selftests.labutil import free_port_base
from wanbench.profiles.lab.servers import Lab

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
pytestmark = [pytest.mark.lab, pytest.mark.slow]


def recipe_files(text: str) -> dict[str, str]:
    """``<!-- recipe: NAME -->`` followed by a fenced python block: NAME -> the block."""
    return dict(re.findall(r"<!-- recipe: (\S+) -->\s*```python\n(.*?)```", text, flags=re.S))


def test_the_document_holds_the_recipe() -> None:
    files = recipe_files(DOC.read_text())
    assert set(files) == {"conftest.py", "test_ping.py"}
    assert "pytest_wanbench_families" in files["conftest.py"]


def test_a_family_built_from_the_recipe_alone_runs_records_and_is_gated(tmp_path: Path) -> None:
    for tool in ("mariadbd", "haproxy"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    here = tmp_path / "family"
    here.mkdir()
    for name, text in recipe_files(DOC.read_text()).items():
        (here / name).write_text(text)
    base = free_port_base(24100, 24300, span=8)
    store, results = tmp_path / "store", tmp_path / "results.json"

    def run(*more: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "--strict-markers",
               "test_ping.py", "--lab-dir", str(tmp_path / "lab"), "--lab-port-base", str(base),
               "--concurrency", "1,4", "--rounds", "2", "--baseline-dir", str(store), *more]
        return subprocess.run(cmd, cwd=here, capture_output=True, text=True, timeout=600, check=False)

    try:
        first = run("--baseline-save", "--results-json", str(results))
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
        assert "[wanbench] cell 1 of 2: test_ping[c1]" in first.stdout  # progress counts the new family's cells
        doc = json.loads(results.read_text())
        cells = doc["results"]
        assert [c["family"] for c in cells] == ["ping", "ping"]
        assert [c["concurrency"] for c in cells] == [1, 4]
        assert all(c["qps"] > 0 and c["verdict"]["status"] == "no-baseline" for c in cells)
        assert [r["clients"] for r in doc["tables"]["ping"]] == [1, 4]
        assert list(store.glob("lab-*.json")), "the accepted run was not kept"

        second = run()
        verdicts = re.findall(r"^\[([a-z-]+)\] select1 ping=- c=", second.stdout, flags=re.M)
        assert len(verdicts) == 2, second.stdout[-3000:]
        assert "no-baseline" not in verdicts, second.stdout[-3000:]  # judged against the stored run
    finally:
        Lab(tmp_path / "lab", base).down()
    assert not [p.name for p in here.iterdir() if p.name not in ("conftest.py", "test_ping.py", ".benchmarks",
                                                                   "__pycache__")]
