"""Everything wanbench writes into the Allure results directory.

Per test (``attach_cell``, called by the lead's ``record`` fixture): titles,
labels and parameters; the HTML result table; CSV, evidence, verdict and
SVG chart attachments; a "compare" step; and the cell's headline metrics as
an Allure 3 ``<uuid>-perf.json`` file (the report's Metrics page, with trends
across runs from Allure 3's history file).

A cell's verdict also becomes labels (its status and reason codes,
``wanbench.report.categories.verdict_labels``): Allure's categories match
those, never the words of a message.

Per run (``write_run_context``, controller process only under xdist):
``environment.properties``, ``executor.json`` (build name = the release under
test) and ``categories.json``. ``attach_summary`` adds the seed-000 summary
matrix and one chart per family as global attachments.

``allurerc(...)`` builds the Allure 3 configuration ``scripts/report`` uses
(history file, categories, report name = release), because Allure 3 reads
categories from its configuration, not from ``categories.json``.

Secrets never enter here: cells carry no credentials and every text written
goes through ``redact`` against the secrets registered with ``add_secret``.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any

import allure
from allure_commons import plugin_manager
from allure_commons._allure import StepContext
from allure_commons.types import AttachmentType

from wanbench import families
from wanbench.redact import hide
from wanbench.report import charts, tables
from wanbench.report import evidence as evidence_report
from wanbench.report.categories import verdict_labels
from wanbench.results import CellResult, dumps_strict, write_json_atomic

#: every cell's metrics -> (title, unit, better); each family adds its own (``perf_metrics``)
PERF_METRICS: Mapping[str, tuple[str, str, str]] = {
    "qps": ("QPS", "qps", "higher"),
    "tps": ("TPS", "tps", "higher"),
    "latency_ms.p95": ("p95 latency", "ms", "lower"),
    "latency_ms.p99": ("p99 latency", "ms", "lower"),
    "error_rate": ("error rate", "%", "lower"),
}


def perf_metrics() -> dict[str, tuple[str, str, str]]:
    """``PERF_METRICS`` and the families' metrics shown in Allure (``wanbench.families``)."""
    return {**PERF_METRICS, **{m.name: (m.title or m.name, m.unit, "higher" if m.higher_is_better else "lower")
                               for m in families.metrics().values() if m.allure}}


@dataclass
class _Session:
    """What this process knows about the run (one per pytest process)."""

    results_dir: Path | None = None
    baselines: dict[tuple[str, str, str, int], Mapping[str, Any]] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    secrets: set[str] = field(default_factory=set)
    #: cells attached in the running test, with their baseline and whether they had a verdict then
    pending: list[tuple[CellResult, Mapping[str, Any] | None, bool]] = field(default_factory=list)
    scenario_cells: dict[int, list[CellResult]] = field(default_factory=dict)


_session = _Session()


def configure(results_dir: str | os.PathLike[str] | None) -> None:
    """Start a session: called by fixtures/allure_report.py at pytest_configure
    (in every process: xdist workers write their cells' metrics themselves)."""
    global _session
    _session = _Session(results_dir=Path(results_dir) if results_dir else None)


def note_environment(**values: Any) -> None:
    """Add run-context facts for environment.properties (e.g. the lead's cluster
    fixture: ``note_environment(profile="lab", versions="mariadb 10.11.6")``)."""
    for k, v in values.items():
        if v is not None and v != "":
            _session.environment[k] = v if isinstance(v, str) else json.dumps(v, sort_keys=True)


def write_broken(results_dir: str | os.PathLike[str], *, nodeid: str, message: str, cluster: str = "") -> None:
    """An Allure result for a test no process could report itself (its xdist
    worker died before or while running it): status broken, with the reason.
    Its history id is the node id's, not allure-pytest's (which needs the
    test's parameter objects)."""
    path, _, name = nodeid.partition("::")
    full_name = f"{path.removesuffix('.py').replace('/', '.')}#{name.split('[', 1)[0]}"
    _write_result(results_dir, name=name or nodeid, full_name=full_name, history=nodeid, status="broken",
                  message=message, labels=[("cluster", cluster)] if cluster else [])


def write_level(results_dir: str | os.PathLike[str], level: Mapping[str, Any]) -> None:
    """An A/B run's level verdict (``ResultsSink.levels``: its cells pooled,
    ``wanbench.gate.ab_levels``) as an Allure result of its own: the status
    it ends the run with, the verdict's labels (what the categories match),
    the message with its tag, the verdict as JSON."""
    from wanbench.gate.budgets import CellKey
    from wanbench.gate.outcome import tag_of

    key = CellKey.parse(str(level["cell"]))
    status, ends = str(level["status"]), str(level.get("ends") or "")
    message = f"{level['message']} {tag_of(status, [str(r) for r in level.get('reasons') or ()])}"
    _write_result(results_dir, name=f"{key.family} level {key.level}: its cells pooled (A/B)",
                  full_name=f"wanbench.ab_levels#{key.family}-{key.level}", history=f"ab-level {key.id}",
                  status=ends or "passed", message=message,
                  labels=[("parentSuite", "A/B levels"), ("suite", key.family), ("tag", "ab-level"),
                          *verdict_labels(level)],
                  attachment=(dumps_strict(dict(level), indent=2), "level verdict"))


def _write_result(results_dir: str | os.PathLike[str], *, name: str, full_name: str, history: str, status: str,
                  message: str, labels: Sequence[tuple[str, str]], attachment: tuple[str, str] | None = None) -> None:
    """One Allure result file written outside any test (allure-pytest writes the tests')."""
    import hashlib

    from allure_commons.logger import AllureFileLogger
    from allure_commons.model2 import Attachment, Label, StatusDetails, TestResult

    now = int(time.time() * 1000)
    logger = AllureFileLogger(str(results_dir))
    attachments = []
    if attachment is not None:
        source = f"{uuid.uuid4()}-attachment.json"
        logger.report_attached_data(redact(attachment[0]).encode(), source)
        attachments.append(Attachment(name=attachment[1], source=source, type="application/json"))
    result = TestResult(uuid=str(uuid.uuid4()), name=name, fullName=full_name,
                        historyId=hashlib.md5(history.encode(), usedforsecurity=False).hexdigest(),
                        status=status, statusDetails=StatusDetails(message=redact(message)), stage="finished",
                        start=now, stop=now, attachments=attachments,
                        labels=[Label(name="framework", value="wanbench"),
                                *(Label(name=k, value=v) for k, v in labels)])
    logger.report_result(result)


def noted_environment() -> dict[str, str]:
    """What was noted for environment.properties in this process (an xdist worker hands it on)."""
    return dict(_session.environment)


def note_run_context(ctx: Mapping[str, Any]) -> None:
    """Record the lead's ``run_context`` (profile, versions, topology shape,
    client, mechanisms, endpoints, params) for environment.properties."""

    def pairs(m: Any, sep: str = "=") -> str:
        if not isinstance(m, Mapping):
            return "" if m is None else str(m)
        return ", ".join(f"{k}{sep}{v}" for k, v in m.items() if v not in (None, "", {}, []))

    client = ctx.get("client") if isinstance(ctx.get("client"), Mapping) else {}
    note_environment(
        profile=ctx.get("profile"),
        cluster=ctx.get("cluster"),
        server_versions=pairs(ctx.get("versions"), " "),
        topology=pairs(ctx.get("topology_shape")),
        fault_mechanisms=pairs(ctx.get("mechanisms")),
        endpoints=pairs(ctx.get("endpoints")),
        params=pairs(ctx.get("params")),
        release=ctx.get("release"),
        client_cpu=f"{client.get('cpu_model', '')} x{client.get('cores', '?')}".strip() if client else None,
    )


def add_secret(secret: str | None) -> None:
    """Register a value (password, DSN) that must never be written."""
    if secret and len(secret) >= 3:
        _session.secrets.add(secret)


def redact(text: str) -> str:
    return hide(text, _session.secrets)


def allure_active() -> bool:
    """True when allure-pytest listens (``--alluredir`` given)."""
    return bool(plugin_manager.hook.attach_data.get_hookimpls())


# -- per test --------------------------------------------------------------------------------------


def _level_label(cell: CellResult) -> str:
    return str(cell.level.get("label", cell.level.get("value", "")))


def _cell_key(cell: CellResult) -> tuple[str, str, str, int]:
    return cell.family, cell.scenario, _level_label(cell), cell.concurrency


def attach_cell(
    cell: CellResult,
    *,
    same_scenario: Sequence[CellResult],
    baseline: Mapping[str, Any] | None = None,
) -> None:
    """Describe one measured cell in the running test's Allure result.

    ``same_scenario``: cells of the same family and scenario measured earlier
    in this session (any level); ``baseline``: ``{"metrics": {metric: value},
    "release": ..., "date": ...}`` or a flat metric mapping, or None.
    """
    _session.pending.append((cell, baseline, bool(cell.verdict)))
    _remember_baseline(cell, baseline)
    if _session.results_dir is not None:
        write_metrics(_session.results_dir, cell)
    if not allure_active():
        return
    lvl = _level_label(cell)
    allure.dynamic.title(charts.cell_title(cell))
    allure.dynamic.parent_suite(cell.family)
    allure.dynamic.suite(cell.scenario)
    allure.dynamic.sub_suite(lvl)
    allure.dynamic.tag(cell.scenario, cell.workload.workload)
    for name, value in (("scenario", cell.scenario), ("level", lvl), ("concurrency", cell.concurrency),
                        ("workload", cell.workload.workload), ("path", cell.path or "-")):
        allure.dynamic.parameter(name, value)
    if cell.cluster:  # a run over several clusters: which one measured the cell (not part of its history id)
        allure.dynamic.label("cluster", str(cell.cluster.get("name", "")))
        allure.dynamic.parameter("cluster", str(cell.cluster.get("name", "")), excluded=True)
    if cell.fault:
        # Readable value for the indirect ``fault`` parameter; its history id
        # still comes from pytest's own parameter value, so it stays stable.
        target = cell.fault.get("component") or cell.scenario
        allure.dynamic.parameter("fault", f"{target}:{cell.fault.get('label', lvl)}")
    run_specific: tuple[tuple[str, Any], ...] = (
        ("run id", cell.extra.get("run_id")), ("started", cell.started), ("finished", cell.finished),
        ("endpoint", cell.extra.get("endpoint")), ("release", cell.extra.get("release")))
    for name, value in run_specific:
        if value:
            allure.dynamic.parameter(name, redact(str(value)), excluded=True)
    stop = (cell.workload.extra.get("interleave") or {}).get("early_stop")
    if stop:  # docs/gate.md, early stop
        allure.dynamic.parameter("pairs", f"{stop['pairs']} of {stop['planned_pairs']} (early stop)", excluded=True)
    heartbeat = cell.extra.get("heartbeat")
    if heartbeat:
        from wanbench.heartbeat_numbers import summary_line
        from wanbench.report.timeline import heartbeat_timeline

        timeline = heartbeat_timeline(heartbeat, title=f"{cell.scenario} {lvl}: heartbeat")
        _attach(timeline, "heartbeat timeline", AttachmentType.SVG)
        if not cell.workload.rounds:  # an availability cell: the heartbeat is all there is
            allure.dynamic.description_html(redact(
                f"<p>{escape(summary_line(f'{cell.scenario} {lvl}', heartbeat))}</p>\n{_inline_svg(timeline)}"))
    scenario_cells = _scenario_cells(cell, same_scenario)
    _session.scenario_cells[id(cell)] = scenario_cells
    if cell.workload.rounds:
        qps_chart = _describe(cell, baseline, scenario_cells)
    if cell.verdict:
        _label_verdict(cell.verdict)
        _compare_step(cell, baseline)

    if cell.workload.rounds:
        _attach(tables.rounds_csv(cell), f"rounds {charts.cell_title(cell)}.csv", AttachmentType.CSV)
        _attach(qps_chart, "QPS vs concurrency", AttachmentType.SVG)
        _attach(charts.latency_vs_concurrency(scenario_cells, _baselines_of(cell)), "p95/p99 vs concurrency",
                AttachmentType.SVG)
    if cell.workload.series or cell.workload.rounds:
        _attach(charts.latency_over_time(cell), "latency over time", AttachmentType.SVG)
    if heartbeat:
        _attach(_dumps({k: v for k, v in heartbeat.items() if k != "attempts"}), "heartbeat numbers",
                AttachmentType.JSON)
    for i, report in enumerate(cell.workload.reports, 1):
        _attach(report, f"{cell.workload.workload} report, round {i}", AttachmentType.TEXT)
    if cell.fault:
        _attach(_dumps(cell.fault), "fault evidence", AttachmentType.JSON)
    if evidence_report.evidence_of(cell):
        level_cells = evidence_report.same_level(cell, scenario_cells)
        _attach(evidence_report.evidence_html(cell), "server-side evidence", AttachmentType.HTML)
        _attach(evidence_report.cpu_qps_chart(level_cells), "CPU per component and QPS vs concurrency",
                AttachmentType.SVG)
        _attach(_dumps(cell.extra["evidence"]), "server-side evidence (JSON)", AttachmentType.JSON)
    if cell.verdict:
        _attach(_dumps(cell.verdict), "budget rule and verdict", AttachmentType.JSON)
    if baseline:
        _attach(_dumps(baseline), "baseline", AttachmentType.JSON)


def finish_test() -> None:
    """After the test body (called by the plugin at makereport): the gate
    judges a cell after ``attach_cell``, so a verdict that appeared since is
    added now: description with baseline and verdict, compare step, verdict
    JSON."""
    pending, _session.pending = _session.pending, []
    scenario_cells = _session.scenario_cells
    _session.scenario_cells = {}
    if not allure_active():
        return
    for cell, baseline, had_verdict in pending:
        if had_verdict or not cell.verdict:
            if not cell.verdict:
                _compare_step(cell, baseline)
            continue
        _remember_baseline(cell, baseline)
        _label_verdict(cell.verdict)
        _describe(cell, baseline, scenario_cells.get(id(cell), [cell]))
        _compare_step(cell, baseline)
        _attach(_dumps(cell.verdict), "budget rule and verdict", AttachmentType.JSON)
        if cell.census:
            _attach(_dumps(cell.census), "WAN cost census (round trips, bytes, work per operation)",
                    AttachmentType.JSON)


def _label_verdict(verdict: Mapping[str, Any]) -> None:
    """The verdict's status and reason codes as labels: what Allure's categories match."""
    for name, value in verdict_labels(verdict):
        allure.dynamic.label(name, value)


def _remember_baseline(cell: CellResult, baseline: Mapping[str, Any] | None) -> None:
    """Keep this cell's baseline numbers for the charts of later cells."""
    metrics = tables.baseline_metrics(baseline, cell.verdict)
    if metrics:
        _session.baselines[_cell_key(cell)] = {"metrics": metrics}


def _baselines_of(cell: CellResult) -> dict[tuple[str, int], Mapping[str, Any]]:
    return {(k[2], k[3]): v for k, v in _session.baselines.items() if k[:2] == (cell.family, cell.scenario)}


def _describe(cell: CellResult, baseline: Mapping[str, Any] | None, scenario_cells: Sequence[CellResult]) -> str:
    """Set the HTML description (table + QPS chart inline, so the overview shows
    the numbers and the curve without a click); returns the chart."""
    qps_chart = charts.qps_vs_concurrency(scenario_cells, _baselines_of(cell))
    evidence = ""
    if evidence_report.evidence_of(cell):
        found = evidence_report.finding_for_cells(evidence_report.same_level(cell, scenario_cells))
        if found is not None:
            evidence += f"<p><b>Finding:</b> {html.escape(found.sentence)}</p>"
        evidence += evidence_report.evidence_html(cell)
    allure.dynamic.description_html(redact(tables.cell_html(cell, baseline) + "\n" + evidence + "\n"
                                           + _inline_svg(qps_chart)))
    return qps_chart


def _inline_svg(svg: str) -> str:
    data = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<p><img alt="chart" style="max-width:100%;height:auto" src="data:image/svg+xml;base64,{data}"></p>'


def _scenario_cells(cell: CellResult, same_scenario: Sequence[CellResult]) -> list[CellResult]:
    """Earlier cells of the scenario plus this one; a re-measured cell
    (same level and concurrency) keeps only its latest numbers."""
    out: dict[tuple[str, str, str, int], CellResult] = {}
    for c in [*same_scenario, cell]:
        if (c.family, c.scenario) == (cell.family, cell.scenario):
            out[_cell_key(c)] = c
    return list(out.values())


def _compare_step(cell: CellResult, baseline: Mapping[str, Any] | None) -> None:
    rows = tables.cell_rows(cell, baseline)
    qps = next(r for r in rows if r.metric == "qps")
    p95 = next(r for r in rows if r.metric == "latency_ms.p95")
    if math.isfinite(qps.baseline):
        title = (f"compare: QPS {tables.fmt(qps.value)} vs baseline {tables.fmt(qps.baseline)} "
                 f"({tables.fmt_change(qps.change_pct)}), p95 {tables.fmt(p95.value, 'ms')} vs "
                 f"{tables.fmt(p95.baseline, 'ms')} ({tables.fmt_change(p95.change_pct)})")
    else:
        title = f"compare: QPS {tables.fmt(qps.value)}, p95 {tables.fmt(p95.value, 'ms')} (no baseline)"
    status = tables.verdict_status(cell.verdict)
    if status:
        title += f": {status}"
    params = {r.label: f"{tables.fmt(r.value, r.unit)} (baseline {tables.fmt(r.baseline, r.unit)}, "
                       f"{tables.fmt_change(r.change_pct)})" for r in rows}
    with StepContext(redact(title), params):
        pass


def _attach(body: str, name: str, kind: AttachmentType) -> None:
    allure.attach(redact(body), name=name, attachment_type=kind)


def _dumps(obj: Any) -> str:
    return dumps_strict(obj, indent=2, sort_keys=True, default=str)


# -- metrics (Allure 3 *-perf.json) ----------------------------------------------------------------


def metric_key(cell: CellResult, metric: str) -> str:
    """Stable across runs, so Allure 3's history gives each key a trend."""
    return f"{cell.family}.{cell.scenario}.{_level_label(cell)}.c{cell.concurrency}.{metric}"


def _epoch_ms(iso: str, fallback: float) -> float:
    try:
        return datetime.fromisoformat(iso).timestamp() * 1000.0
    except (TypeError, ValueError):
        return fallback


def metric_samples(cell: CellResult) -> list[dict[str, Any]]:
    """The cell's headline numbers in Allure 3's metric format."""
    now = time.time() * 1000.0
    stop = _epoch_ms(cell.finished, now)
    start = min(_epoch_ms(cell.started, stop), stop)
    values = {**cell.metrics(), **families.headline_of(cell.to_json())}
    out = []
    for metric, (title, unit, better) in perf_metrics().items():
        v = values.get(metric)
        if v is None or not math.isfinite(v):
            continue
        if metric == "tps" and math.isclose(v, values.get("qps", math.nan), rel_tol=1e-9):
            continue  # probes: one query per transaction, TPS would repeat QPS
        value = float(v) * 100.0 if unit == "%" else float(v)
        out.append({
            "id": str(uuid.uuid4()),
            "key": metric_key(cell, metric),
            "value": round(value, 3) if abs(value) < 100 else round(value, 1),
            "start": round(start),
            "stop": round(stop),
            "title": f"{charts.cell_title(cell)} {title}",
            "unit": unit,
            "group": f"{cell.family}.{cell.scenario}",
            "groupTitle": f"{cell.family}: {cell.scenario}",
            "better": better,
        })
    return out


def write_metrics(results_dir: Path, cell: CellResult) -> Path | None:
    samples = metric_samples(cell)
    if not samples:
        return None
    path = results_dir / f"{uuid.uuid4()}-perf.json"
    write_json_atomic(path, samples)
    return path


# -- summary ---------------------------------------------------------------------------------------


def attach_summary(cells: Sequence[CellResult | Mapping[str, Any]]) -> None:
    """The seed-000 summary matrix (HTML + CSV) and one chart per family, as
    Allure global attachments (shown on the report's Globals page)."""
    if not cells or not allure_active():
        return
    allure.global_attach(redact(tables.summary_html(cells)), name="summary matrix (QPS and % drop per level)",
                         attachment_type=AttachmentType.HTML)
    allure.global_attach(redact(tables.summary_csv(cells)), name="summary matrix.csv",
                         attachment_type=AttachmentType.CSV)
    for family, rows in tables.summary_rows(cells).items():
        allure.global_attach(charts.family_summary_chart(family, rows), name=f"summary chart: {family}",
                             attachment_type=AttachmentType.SVG)


