"""The report of a real (small) lab run: RTT family, replica_write, two levels
and two concurrencies through the real lab (MariaDB + semi-sync replica +
HAProxy + Toxiproxy), allure-pytest, Allure 3 via scripts/report, and the
generated page opened in headless Chromium. Also greps everything written
for the lab's password."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selftests.labutil import needs
from wanbench.wait import wait_for

ROOT = Path(__file__).resolve().parents[1]
PORT_BASE = 26300  # this self-test's lab ports: 26300..26307
HTTP_PORT = 26380  # the report is served here for Chromium

pytestmark = [pytest.mark.lab, pytest.mark.slow]


def _tools_present() -> None:
    needs("mariadbd", "haproxy", "sysbench", "toxiproxy-server")
    if not (ROOT / "node_modules" / ".bin" / "allure").exists():
        pytest.skip("Allure 3 not installed (node_modules/.bin/allure): run scripts/setup")


@pytest.fixture(scope="module")
def lab_report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Start the lab ourselves (so we know its password), run the RTT tests
    against it with --alluredir, generate the report, stop the lab."""
    _tools_present()
    from wanbench.profiles.lab.servers import Lab

    tmp = tmp_path_factory.mktemp("labreport")
    lab = Lab(tmp / "lab", PORT_BASE)
    lab.up(owner="manual")
    try:
        password = lab.credentials.password
        results, report_dir = tmp / "results", tmp / "report"
        cmd = [sys.executable, "-m", "pytest", "tests/rtt", "-k", "rtt and replica_write", "--rtt", "0,50ms",
               "--concurrency", "10,50", "--rounds", "2", "--queries", "200", "--lab-port-base", str(PORT_BASE),
               "--lab-dir", str(tmp / "lab"), f"--alluredir={results}",
               "-p", "no:cacheprovider", "-q"]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        env = {**os.environ, "WANBENCH_ALLURE_HISTORY": str(tmp / "history.jsonl"),
               "WANBENCH_REPORT_DIR": str(report_dir)}
        gen = subprocess.run([str(ROOT / "scripts" / "report"), "generate", str(results)], env=env,
                             capture_output=True, text=True, timeout=300, check=False)
        assert gen.returncode == 0, gen.stdout + gen.stderr
        yield {"results": results, "report": report_dir, "password": password, "tmp": tmp, "stdout": proc.stdout}
    finally:
        lab.down()


def _results(report: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in (report / "data" / "test-results").glob("*.json")]


def test_every_lab_test_is_in_the_report_with_parameters(lab_report: dict[str, Any]) -> None:
    results = _results(lab_report["report"])
    names = sorted(tr["name"] for tr in results)
    assert names == ["replica_write rtt=0ms c=10", "replica_write rtt=0ms c=50",
                     "replica_write rtt=50ms c=10", "replica_write rtt=50ms c=50"]
    for tr in results:
        params = {p["name"]: p["value"] for p in tr["parameters"]}
        assert params["scenario"] == "'replica_write'"
        assert params["level"] in ("'0ms'", "'50ms'")
        assert params["concurrency"] in ("10", "50")
        assert {"workload", "path"} <= set(params)
        excluded = {p["name"] for p in tr["parameters"] if p["excluded"]}
        assert {"started", "finished"} <= excluded
        labels = {(lb["name"], lb["value"]) for lb in tr["labels"]}
        assert {("parentSuite", "rtt"), ("suite", "replica_write")} <= labels


def test_each_performance_test_has_csv_and_charts(lab_report: dict[str, Any]) -> None:
    report = lab_report["report"]
    for tr in _results(report):
        atts = [s["link"] for s in tr["steps"] if s.get("type") == "attachment"]
        csvs = [a for a in atts if a["contentType"] == "text/csv"]
        svgs = [a for a in atts if a["contentType"] == "image/svg+xml"]
        assert csvs, tr["name"]
        assert len(svgs) >= 3, tr["name"]  # QPS, p95/p99, over time
        rows = (report / "data" / "attachments" / f"{csvs[0]['id']}{csvs[0]['ext']}").read_text().splitlines()
        assert len(rows) == 3  # header + 2 rounds of real numbers
        assert float(rows[1].split(",")[3]) > 0  # QPS
        assert "<table" in tr["descriptionHtml"]
        assert "data:image/svg+xml;base64," in tr["descriptionHtml"]


def test_environment_categories_metrics_globals(lab_report: dict[str, Any]) -> None:
    widgets = lab_report["report"] / "widgets"
    env = {e["name"]: e["values"][0] for e in json.loads((widgets / "allure_environment.json").read_text())}
    assert env["profile"] == "lab"
    assert env["server_versions"].startswith("mariadb ")
    assert "replica=1" in env["topology"]
    assert env["fault_mechanisms_used"] == "toxiproxy"
    assert env["client_host"]
    categories = json.loads((lab_report["results"] / "categories.json").read_text())
    assert {"Performance regression", "Fault could not be applied or verified", "Infrastructure error",
            "Inconclusive: too noisy to judge"} <= {c["name"] for c in categories}
    nodes = json.loads((widgets / "categories.json").read_text())["nodes"]
    totals = {n["name"]: n["statistic"]["total"] for n in nodes.values() if n.get("type") == "category"}
    assert sum(totals.values()) == len(_results(lab_report["report"])), totals  # every cell's verdict, classified
    metrics = json.loads((widgets / "metrics.json").read_text())["current"]
    keys = {m["key"] for m in metrics}
    assert "rtt.replica_write.50ms.c10.qps" in keys
    assert "rtt.replica_write.0ms.c50.latency_ms.p95" in keys
    globals_ = json.loads((widgets / "globals.json").read_text())["attachments"]
    assert sorted(a["contentType"] for a in globals_) == ["image/svg+xml", "text/csv", "text/html"]


def test_lab_password_is_nowhere(lab_report: dict[str, Any]) -> None:
    password = lab_report["password"].encode()
    assert len(password) >= 16
    scanned = 0
    for where in (lab_report["results"], lab_report["report"]):
        for p in where.rglob("*"):
            if p.is_file():
                scanned += 1
                assert password not in p.read_bytes(), f"the lab password leaked into {p}"
    assert scanned > 20
    assert password.decode() not in lab_report["stdout"]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_report_page_renders_in_chromium(lab_report: dict[str, Any]) -> None:
    if not shutil.which("chromium"):
        pytest.skip("chromium not installed (apt-get install chromium)")
    report = lab_report["report"]
    if not _port_free(HTTP_PORT):
        pytest.fail(f"port {HTTP_PORT} is busy: another report server runs")
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(HTTP_PORT), "--bind", "127.0.0.1",
                               "--directory", str(report)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: not _port_free(HTTP_PORT), what=f"report server on 127.0.0.1:{HTTP_PORT}", timeout=20)
        tr = next(t for t in _results(report) if t["name"] == "replica_write rtt=50ms c=50")
        out = lab_report["tmp"] / "test-page.png"
        shot = subprocess.run([str(ROOT / "scripts" / "report"), "screenshot",
                               f"http://127.0.0.1:{HTTP_PORT}/index.html#/{tr['id']}", str(out), "1400x1600"],
                              capture_output=True, text=True, timeout=120, check=False)
        assert shot.returncode == 0, shot.stdout + shot.stderr
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert out.stat().st_size > 50_000  # a rendered page with a chart, not a blank one
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
