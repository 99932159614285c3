"""The census as the terminal shows it: one row per cell (``wanbench.census`` computes it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def table_rows(cells: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """Terminal rows: cell, the drop against the level-0 rounds beside it
    (interleaved; the spread of log(QPS ratio) over its pairs), round trips,
    bytes per op by server, statements per op, the prediction, and TiDB's KV
    requests per operation by type ("~": not a count there, not gated)."""
    rows = []
    for c in cells:
        census = c.get("census") or {}
        metrics = census.get("metrics") or {}
        if not metrics:
            continue
        def shown(m: Mapping[str, Any], fmt: str) -> str:  # "~": reported, not a count here (not gated)
            return ("~" if m.get("count") is False else "") + format(m["value"], fmt)

        rt = metrics.get("round_trips")
        links = {k.split(".", 1)[1]: shown(m, ".0f") for k, m in metrics.items() if k.startswith("bytes_per_op.")}
        stmts = {k.split(".")[1]: shown(m, ".2f") for k, m in metrics.items() if k.endswith(".statements")}
        pred = census.get("prediction") or {}
        il = census.get("interleaved") or {}
        kv = {k.rsplit(".", 1)[1]: shown(m, ".2f") for k, m in metrics.items()
              if ".kv_requests." in k and (m["value"] >= 0.005 or m.get("count") is not False)
              and m["value"] > 0}
        rows.append([
            str(c.get("label") or c.get("test_id")),
            (("A/A " if il.get("aa_guard") else "") + f"{il['drop'] * 100:.1f}%"
             + (f" (sd {il['log_ratio_sd']:.3f})" if il.get("log_ratio_sd") is not None else ""))
            if il.get("drop") is not None else "-",
            "-" if rt is None else shown(rt, ".2f"),
            ", ".join(f"{k} {v}" for k, v in sorted(links.items())) or "-",
            ", ".join(f"{k} {v}" for k, v in sorted(stmts.items())) or "-",
            f"{pred['measured_qps']:.0f} / {pred['predicted_qps']:.0f} ({pred['gap'] * 100:+.0f}%)" if pred else "-",
            ", ".join(f"{k} {v}" for k, v in sorted(kv.items())) or "-",
        ])
    return rows


def census_summary(tr: Any, cells: Sequence[Mapping[str, Any]]) -> None:
    """The WAN cost census per cell (results-JSON cells) in the terminal
    summary: what the fault acted on, per operation (docs/census.md)."""
    from wanbench.gate.baseline import cell_key
    from wanbench.report.tables import text_table

    rows = table_rows([{**c["census"], "label": cell_key(c).label, "census": c["census"]}
                       for c in cells if c.get("census")])
    if not rows:
        return
    tr.section("wanbench census: round trips, bytes and statements per operation")
    head = ["cell", "drop beside level 0 (A/A guard at level 0)", "round trips/op", "bytes/op by server",
            "statements/op by server", "QPS measured / predicted", "KV requests/op (TiDB)"]
    if all(r[-1] == "-" for r in rows):  # no TiDB cell: no KV column
        head, rows = head[:-1], [r[:-1] for r in rows]
    for line in text_table(head, rows, right=(1, 2)):
        tr.write_line(line)
    for c in cells:
        finding = ((c.get("census") or {}).get("prediction") or {}).get("finding")
        if finding:
            tr.write_line(f"[census] {cell_key(c).label}: {finding}")
