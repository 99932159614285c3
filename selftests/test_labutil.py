"""The self-tests' own helpers: a lab test that cannot run here says so, and under CI fails."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from selftests import labutil
from selftests.labutil import needs, passed_or_only_level0_regressions


def test_a_missing_tool_skips_here_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="wb-no-such-tool is not installed"):
        needs("sh", "wb-no-such-tool")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="wb-no-such-tool is missing, and CI installs it"):
        needs("wb-no-such-tool")
    needs("sh")  # present: nothing happens


def test_the_projects_own_bin_directory_counts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """toxiproxy-server and tpchgen-cli live in the checkout's bin/ (scripts/setup), not on PATH."""
    tool = tmp_path / "bin" / "wb-own-tool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setattr(labutil, "ROOT", tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CI", "true")
    labutil.needs("wb-own-tool")


def _run(rc: int, summary: str) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], rc, stdout=f"...\n{summary}\n", stderr="")


def _cell(*checks: tuple[str, str]) -> dict[str, object]:
    worse = any(status == "regression" for _kind, status in checks)
    return {"verdict": {"status": "regression" if worse else "pass",
                        "checks": [{"kind": k, "status": s, "message": f"{k} {s}"} for k, s in checks]}}


def _results(tmp_path: Path, *cells: dict[str, object]) -> Path:
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"results": list(cells)}))
    return path


def test_a_run_that_failed_only_on_level0_checks_is_told_apart_from_any_other_failure(tmp_path: Path) -> None:
    timing = _cell(("level0", "regression"), ("absolute", "pass"))
    fine = _cell(("level0", "pass"))
    assert passed_or_only_level0_regressions(_run(0, "4 passed"), _results(tmp_path, fine)) == []
    got = passed_or_only_level0_regressions(_run(1, "1 failed, 3 passed in 20.1s"), _results(tmp_path, timing, fine))
    assert got == ["level0 regression"]
    for rc, summary, cells in (
        (1, "1 failed, 3 passed", (_cell(("level0", "regression"), ("census", "regression")),)),
        (1, "1 failed, 3 passed", (_cell(("absolute", "regression")),)),
        (1, "2 failed, 2 passed", (timing, fine)),  # a failed test that is not that cell
        (1, "1 failed, 2 passed, 1 error", (timing,)),
        (2, "interrupted", (fine,)),
    ):
        with pytest.raises(AssertionError):
            passed_or_only_level0_regressions(_run(rc, summary), _results(tmp_path, *cells))
