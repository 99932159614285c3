"""The run-level files of an Allure results directory: each cell's metrics
(Allure 3 ``*-perf.json``), the run context (``environment.properties``,
``executor.json``), and the Allure 3 configuration ``scripts/report`` uses
(``allurerc``, ``python -m wanbench.report rc``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from wanbench.procs import cpu_model
from wanbench.report import allure_out
from wanbench.report.allure_out import redact
from wanbench.report.categories import allure3_rules, compat_rules
from wanbench.results import CellResult, write_json_atomic, write_text_atomic

# -- run context -----------------------------------------------------------------------------------


def _prop_escape(text: str, key: bool = False) -> str:
    out = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    if key:
        for ch in " =:#!":
            out = out.replace(ch, "\\" + ch)
    return out


def environment_properties(values: Mapping[str, str]) -> str:
    """Java .properties text (what Allure's reader parses)."""
    return "".join(f"{_prop_escape(k, key=True)}={_prop_escape(str(v))}\n" for k, v in sorted(values.items()))


def client_facts() -> dict[str, str]:
    return {
        "client_host": socket.gethostname(),
        "client_os": f"{platform.system()} {platform.release()}",
        "client_cpu": f"{cpu_model()} x{os.cpu_count()}".strip(),
        "python": platform.python_version(),
    }


def run_environment(extra: Mapping[str, Any] | None = None,
                    cells: Iterable[CellResult] = ()) -> dict[str, str]:
    """environment.properties values: client facts, what was noted, what cells show."""
    env = client_facts()
    env.update(allure_out.noted_environment())  # the session object is replaced per run: read it now
    used = sorted({str(c.fault.get("mechanism")) for c in cells
                   if c.fault and c.fault.get("mechanism") not in (None, "", "none")})
    if used:
        env["fault_mechanisms_used"] = ", ".join(used)
    families = sorted({c.family for c in cells})
    if families:
        env["families"] = ", ".join(families)
    for k, v in (extra or {}).items():
        if v is not None and v != "":
            env[k] = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return env


def executor_info(release: str | None, run_id: str = "", name: str = "wanbench") -> dict[str, Any]:
    """executor.json: Allure names the build (and the run in history) after it."""
    build = release or "unreleased"
    return {
        "name": name,
        "type": "pytest",
        "buildName": build,
        "buildOrder": int(time.time()),
        "reportName": f"wanbench {build}",
        **({"runId": run_id} if run_id else {}),
    }


def write_run_context(results_dir: str | os.PathLike[str], *, environment: Mapping[str, str],
                      release: str | None, run_id: str = "") -> None:
    """environment.properties, executor.json, categories.json (controller only)."""
    d = Path(results_dir)
    d.mkdir(parents=True, exist_ok=True)
    write_text_atomic(d / "environment.properties", redact(environment_properties(environment)))
    write_json_atomic(d / "executor.json", executor_info(release, run_id))
    write_json_atomic(d / "categories.json", compat_rules())


# -- Allure 3 configuration for scripts/report -----------------------------------------------------


def allurerc(results_dirs: Sequence[str], *, history_path: str, single_file: bool = False,
             name: str | None = None) -> dict[str, Any]:
    """Allure 3 config: history JSONL (trends across runs), categories,
    report name = the release of executor.json, suites grouped by family.

    The categories are this wanbench's (``allure3_rules``: statuses and the
    verdict's labels), not a results directory's ``categories.json``: that
    file holds Allure 2's form, which can match only a message, and passed
    cells (pass, no-baseline, improvement) have none."""
    release = None
    for rd in results_dirs:
        try:
            release = release or json.loads((Path(rd) / "executor.json").read_text()).get("buildName")
        except (OSError, ValueError):
            pass
    return {
        "name": name or f"wanbench {release or ''}".strip(),
        "historyPath": history_path,
        "categories": allure3_rules(),
        "plugins": {
            "awesome": {
                "options": {
                    "singleFile": single_file,
                    "reportLanguage": "en",
                    "groupBy": ["parentSuite", "suite", "subSuite"],
                },
            },
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m wanbench.report",
                                description="Write the Allure 3 config scripts/report uses.")
    p.add_argument("command", choices=["rc"])
    p.add_argument("results", nargs="+")
    p.add_argument("--history", required=True)
    p.add_argument("--single-file", action="store_true")
    p.add_argument("--name", default=None)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    write_json_atomic(a.out, allurerc(a.results, history_path=a.history, single_file=a.single_file, name=a.name))
    return 0
