"""The self-tests' own helpers: a lab test that cannot run here says so, and under CI fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from selftests import labutil
from selftests.labutil import needs


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
