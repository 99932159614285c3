"""TPC-H's library part without a server: the parameters of clause 2.4, the
answer rules of clause 2.1.3.5, the power formula, the integrity path of a
wrong answer, the socket byte counter, and the generator's cache (real
``tpchgen-cli`` at SF 0.01, ~2 s). The lab tests are in test_tpch_lab.py.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import socket
import stat
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from wanbench.errors import CommandError, ConfigError, InfrastructureError
from wanbench.workloads import tpch, tpch_data, tpch_queries
from wanbench.workloads.tpch_answers import Answer, compare, value_problem
from wanbench.workloads.tpch_queries import (
    COLORS,
    CONTAINER_SYLLABLES,
    NATIONS,
    REGIONS,
    SEGMENTS,
    SHIP_MODES,
    STREAM0_ORDER,
    TYPE_SYLLABLES,
    query,
    random_params,
    validation_params,
)

# ---------------------------------------------------------------- parameters (clause 2.4.x.4 and 2.4.x.3)

#: the query validation parameters as the specification lists them (clause 2.4.x.4)
SPEC_VALIDATION = {
    1: {"DELTA": "90"},
    2: {"SIZE": "15", "TYPE": "BRASS", "REGION": "EUROPE"},
    3: {"SEGMENT": "BUILDING", "DATE": "1995-03-15"},
    4: {"DATE": "1993-07-01"},
    5: {"REGION": "ASIA", "DATE": "1994-01-01"},
    6: {"DATE": "1994-01-01", "DISCOUNT": "0.06", "QUANTITY": "24"},
    7: {"NATION1": "FRANCE", "NATION2": "GERMANY"},
    8: {"NATION": "BRAZIL", "REGION": "AMERICA", "TYPE": "ECONOMY ANODIZED STEEL"},
    9: {"COLOR": "green"},
    10: {"DATE": "1993-10-01"},
    11: {"NATION": "GERMANY", "FRACTION": "0.0001000000"},
    12: {"SHIPMODE1": "MAIL", "SHIPMODE2": "SHIP", "DATE": "1994-01-01"},
    13: {"WORD1": "special", "WORD2": "requests"},
    14: {"DATE": "1995-09-01"},
    15: {"DATE": "1996-01-01"},
    16: {"BRAND": "Brand#45", "TYPE": "MEDIUM POLISHED", "SIZE1": "49", "SIZE2": "14", "SIZE3": "23",
         "SIZE4": "45", "SIZE5": "19", "SIZE6": "3", "SIZE7": "36", "SIZE8": "9"},
    17: {"BRAND": "Brand#23", "CONTAINER": "MED BOX"},
    18: {"QUANTITY": "300"},
    19: {"QUANTITY1": "1", "QUANTITY2": "10", "QUANTITY3": "20", "BRAND1": "Brand#12", "BRAND2": "Brand#23",
         "BRAND3": "Brand#34"},
    20: {"COLOR": "forest", "DATE": "1994-01-01", "NATION": "CANADA"},
    21: {"NATION": "SAUDI ARABIA"},
    22: {"I1": "13", "I2": "31", "I3": "23", "I4": "29", "I5": "30", "I6": "18", "I7": "17"},
}


@pytest.mark.parametrize("number", range(1, 23))
def test_validation_parameters_are_the_specifications(number: int) -> None:
    assert validation_params(number, 1.0) == SPEC_VALIDATION[number]
    assert set(SPEC_VALIDATION[number]) == set(query(number).parameters)


def test_q11_fraction_scales_with_the_scale_factor() -> None:
    assert validation_params(11, 0.01)["FRACTION"] == "0.0100000000"  # 0.0001 / SF (clause 2.4.11.3)
    assert random_params(11, 5, 0.1)["FRACTION"] == "0.0010000000"


def _date(text: str) -> datetime.date:
    return datetime.date.fromisoformat(text)


def _first_of_month(text: str, first: tuple[int, int], last: tuple[int, int]) -> bool:
    d = _date(text)
    return d.day == 1 and first <= (d.year, d.month) <= last


def _new_year(text: str) -> bool:
    d = _date(text)
    return (d.month, d.day) == (1, 1) and 1993 <= d.year <= 1997


def _brand(text: str) -> bool:
    return len(text) == 8 and text.startswith("Brand#") and all(c in "12345" for c in text[6:])


def _in(lo: int, hi: int, text: str) -> bool:
    return lo <= int(text) <= hi


TYPES = {" ".join((a, b, c)) for a in TYPE_SYLLABLES[0] for b in TYPE_SYLLABLES[1] for c in TYPE_SYLLABLES[2]}

#: each query's parameters within the ranges of clause 2.4.x.3
IN_RANGE = {
    1: lambda p: _in(60, 120, p["DELTA"]),
    2: lambda p: _in(1, 50, p["SIZE"]) and p["TYPE"] in TYPE_SYLLABLES[2] and p["REGION"] in REGIONS,
    3: lambda p: p["SEGMENT"] in SEGMENTS and datetime.date(1995, 3, 1) <= _date(p["DATE"])
    <= datetime.date(1995, 3, 31),
    4: lambda p: _first_of_month(p["DATE"], (1993, 1), (1997, 10)),
    5: lambda p: p["REGION"] in REGIONS and _new_year(p["DATE"]),
    6: lambda p: _new_year(p["DATE"]) and p["DISCOUNT"] in {f"0.0{i}" for i in range(2, 10)}
    and _in(24, 25, p["QUANTITY"]),
    7: lambda p: p["NATION1"] in NATIONS and p["NATION2"] in NATIONS and p["NATION1"] != p["NATION2"],
    8: lambda p: p["NATION"] in NATIONS and p["REGION"] == NATIONS[p["NATION"]] and p["TYPE"] in TYPES,
    9: lambda p: p["COLOR"] in COLORS,
    10: lambda p: _first_of_month(p["DATE"], (1993, 2), (1995, 1)),
    11: lambda p: p["NATION"] in NATIONS and float(p["FRACTION"]) == pytest.approx(0.0001),
    12: lambda p: p["SHIPMODE1"] in SHIP_MODES and p["SHIPMODE2"] in SHIP_MODES and p["SHIPMODE1"] != p["SHIPMODE2"]
    and _new_year(p["DATE"]),
    13: lambda p: p["WORD1"] in ("special", "pending", "unusual", "express")
    and p["WORD2"] in ("packages", "requests", "accounts", "deposits"),
    14: lambda p: _first_of_month(p["DATE"], (1993, 1), (1997, 12)),
    15: lambda p: _first_of_month(p["DATE"], (1993, 1), (1997, 10)),
    16: lambda p: _brand(p["BRAND"]) and p["TYPE"].split() in ([a, b] for a in TYPE_SYLLABLES[0]
                                                               for b in TYPE_SYLLABLES[1])
    and len({p[f"SIZE{i}"] for i in range(1, 9)}) == 8 and all(_in(1, 50, p[f"SIZE{i}"]) for i in range(1, 9)),
    17: lambda p: _brand(p["BRAND"]) and p["CONTAINER"].split() in ([a, b] for a in CONTAINER_SYLLABLES[0]
                                                                    for b in CONTAINER_SYLLABLES[1]),
    18: lambda p: _in(312, 315, p["QUANTITY"]),
    19: lambda p: all(_brand(p[f"BRAND{i}"]) for i in (1, 2, 3)) and _in(1, 10, p["QUANTITY1"])
    and _in(10, 20, p["QUANTITY2"]) and _in(20, 30, p["QUANTITY3"]),
    20: lambda p: p["COLOR"] in COLORS and _new_year(p["DATE"]) and p["NATION"] in NATIONS,
    21: lambda p: p["NATION"] in NATIONS,
    22: lambda p: len({p[f"I{i}"] for i in range(1, 8)}) == 7 and all(_in(10, 34, p[f"I{i}"]) for i in range(1, 8)),
}


@pytest.mark.parametrize("number", range(1, 23))
def test_seeded_parameters_are_reproducible_and_within_the_specifications_ranges(number: int) -> None:
    drawn = [random_params(number, seed, 1.0) for seed in range(300)]
    assert drawn == [random_params(number, seed, 1.0) for seed in range(300)]  # reproducible
    bad = [(seed, p) for seed, p in enumerate(drawn) if not IN_RANGE[number](p)]
    assert not bad, f"Q{number}: out of range: {bad[:3]}"
    assert len({json.dumps(p, sort_keys=True) for p in drawn}) > 1, f"Q{number}: every seed gave the same"
    assert set(drawn[0]) == set(query(number).parameters)


def test_seeded_parameters_cover_their_ranges() -> None:
    deltas = {int(random_params(1, s)["DELTA"]) for s in range(2000)}
    assert min(deltas) == 60
    assert max(deltas) == 120
    assert len(deltas) == 61
    q10 = {random_params(10, s)["DATE"] for s in range(2000)}
    assert min(q10) == "1993-02-01"
    assert max(q10) == "1995-01-01"
    assert len(q10) == 24


def test_a_seed_fixes_a_whole_stream() -> None:
    assert tpch_queries.stream_params(0.1, 42) == tpch_queries.stream_params(0.1, 42)
    assert tpch_queries.stream_params(0.1, 42) != tpch_queries.stream_params(0.1, 43)
    assert tpch_queries.stream_params(0.1) == {n: validation_params(n, 0.1) for n in range(1, 23)}


def test_stream_0_is_appendix_a_and_every_query_renders() -> None:
    assert STREAM0_ORDER[:4] == (14, 2, 9, 20)
    assert sorted(STREAM0_ORDER) == list(range(1, 23))
    limits = {}
    for n in range(1, 23):
        q = query(n)
        for params in (validation_params(n, 0.01), random_params(n, 3, 0.01)):
            sql = q.sql(params)
            assert "$" not in sql, q.label
            assert ";" not in sql, q.label
            assert "CREATE" not in sql.upper(), q.label  # no DDL in a round (Q15 is a CTE)
        limits[n] = q.limit
        unlimited = q.sql_unlimited(validation_params(n))
        assert "LIMIT" not in unlimited.upper().split("\n")[-1]
    assert {n: lim for n, lim in limits.items() if lim} == {2: 100, 3: 10, 10: 20, 18: 100, 21: 100}


def test_a_parameter_value_cannot_carry_sql() -> None:
    with pytest.raises(ConfigError, match="Q21: parameter NATION"):
        query(21).sql({"NATION": "x' OR '1'='1"})
    with pytest.raises(ConfigError, match="no value for parameter"):
        query(1).sql({})
    with pytest.raises(ConfigError, match="queries 1..22"):
        validation_params(23)


# ---------------------------------------------------------------- answer rules (clause 2.1.3.5)

@pytest.mark.parametrize(("kind", "got", "expected", "ok"), [
    ("exact", 14876, 14876, True),
    ("exact", Decimal("380456.00"), 380456, True),  # SUM(l_quantity): exact (comment 4), as a decimal
    ("exact", 14876, 14877, False),
    ("exact", Decimal("4186.95"), Decimal("4186.96"), False),  # a singleton decimal: exact
    ("exact", "Supplier#000000077   ", "Supplier#000000077", True),  # trailing blanks are acceptable
    ("exact", "FRANCE", "GERMANY", False),
    ("exact", datetime.date(1995, 3, 11), "1995-03-11", True),
    ("exact", None, None, True),
    ("exact", None, 0, False),
    ("sum", Decimal("1000000.00"), Decimal("1000099.99"), True),  # within $100
    ("sum", Decimal("1000000.00"), Decimal("1000100.01"), False),
    ("sum", Decimal("505822441.4861"), 505822441.48609, True),
    ("avg", Decimal("25.575155"), 25.575154611454693, True),
    ("avg", 25.5, 25.75, True),  # 0.97 %: within 1 % when rounded to 1/100
    ("avg", 25.5, 25.80, False),  # 1.16 %
    ("avg", 0.054, 0.0549, True),  # both round to 0.05
    ("avg", 0.054, 0.056, False),  # 0.05 vs 0.06
    ("ratio", 15.486545, 15.4865458, True),
    ("ratio", 15.30, 15.49, False),  # 1.2 %
    ("ratio", None, 0.0, False),
])
def test_value_rules(kind: str, got: object, expected: object, ok: bool) -> None:
    assert (value_problem(kind, got, expected) is None) is ok


def _q(number: int) -> tpch_queries.Query:
    return query(number)


def test_matching_answers_have_no_problems() -> None:
    rows = (("A", "F", Decimal("380456.00"), Decimal("532348211.65"), Decimal("505822441.4861"),
             Decimal("526165934.000839"), 25.575154, 35785.709306, 0.050081, 14876),
            ("N", "F", Decimal("8971.00"), Decimal("12384801.37"), Decimal("11798257.2080"),
             Decimal("12282485.056933"), 25.778735, 35588.509683, 0.047758, 348))
    cols = ("l_returnflag", "l_linestatus", "sum_qty", "sum_base_price", "sum_disc_price", "sum_charge",
            "avg_qty", "avg_price", "avg_disc", "count_order")
    mariadb_like = tuple(tuple(Decimal(str(round(v, 4))) if isinstance(v, float) else v for v in r) for r in rows)
    assert compare(_q(1), Answer(cols, mariadb_like), Answer(cols, rows)) == []


def test_a_wrong_value_names_query_row_column_and_both_values() -> None:
    cols = ("l_returnflag", "l_linestatus", "sum_qty", "sum_base_price", "sum_disc_price", "sum_charge",
            "avg_qty", "avg_price", "avg_disc", "count_order")
    ref = (("A", "F", Decimal("380456.00"), Decimal(1), Decimal(1), Decimal(1), 25.5, 1.0, 0.05, 14876),
           ("N", "F", Decimal("8971.00"), Decimal(1), Decimal(1), Decimal(1), 25.5, 1.0, 0.05, 348))
    got = (ref[0], ("N", "F", Decimal("8972.00"), Decimal(1), Decimal(1), Decimal(1), 25.5, 1.0, 0.05, 349))
    problems = compare(_q(1), Answer(cols, got), Answer(cols, ref))
    assert [(p.query, p.row, p.column, p.rule) for p in problems] == [
        (1, 2, "sum_qty", "exact"), (1, 2, "count_order", "exact")]
    assert problems[0].message() == ("Q1 row 2, sum_qty: got 8972.00, expected 8971.00 "
                                     "(not equal; clause 2.1.3.5 a: singleton values and counts match exactly)")
    assert problems[1].to_json()["got"] == 349
    assert problems[1].to_json()["expected"] == 348


def test_order_matters_where_the_keys_differ() -> None:
    cols = ("o_orderpriority", "order_count")
    ref = (("1-URGENT", 93), ("2-HIGH", 103))
    problems = compare(_q(4), Answer(cols, (ref[1], ref[0])), Answer(cols, ref))
    assert {(p.row, p.column) for p in problems} == {(1, "o_orderpriority"), (1, "order_count"),
                                                      (2, "o_orderpriority"), (2, "order_count")}


def test_rows_that_tie_on_the_order_keys_may_come_in_any_order() -> None:
    cols = ("l_orderkey", "revenue", "o_orderdate", "o_shippriority")  # Q3: ORDER BY revenue DESC, o_orderdate
    d = datetime.date(1995, 3, 1)
    ref = ((1, Decimal(500), d, 0), (2, Decimal(400), d, 0), (3, Decimal(400), d, 0), (4, Decimal(300), d, 0))
    swapped = (ref[0], ref[2], ref[1], ref[3])
    assert compare(_q(3), Answer(cols, swapped), Answer(cols, ref)) == []


def test_limit_ties_accept_any_of_the_tying_rows() -> None:
    """Q3 keeps 10 rows; rows 9..12 of the full answer tie on (revenue, o_orderdate):
    any two of them may be the 9th and 10th."""
    cols = ("l_orderkey", "revenue", "o_orderdate", "o_shippriority")
    d = datetime.date(1995, 3, 1)
    ref = tuple((k, Decimal(1000 - k), d, 0) for k in range(1, 9)) + tuple((k, Decimal(100), d, 0)
                                                                          for k in range(9, 13))
    kept = ref[:8] + (ref[11], ref[9])
    assert compare(_q(3), Answer(cols, kept), Answer(cols, ref)) == []
    outsider = ref[:8] + (ref[11], (99, Decimal(100), d, 0))
    problems = compare(_q(3), Answer(cols, outsider), Answer(cols, ref))
    assert [(p.row, p.column) for p in problems] == [(10, "l_orderkey")]
    assert "got 99" in problems[0].message()


def test_missing_and_extra_rows_are_named() -> None:
    cols = ("o_orderpriority", "order_count")
    ref = (("1-URGENT", 93), ("2-HIGH", 103), ("3-MEDIUM", 95))
    missing = compare(_q(4), Answer(cols, ref[:2]), Answer(cols, ref))
    assert [p.what for p in missing] == ["rows", "row"]
    assert missing[0].message() == "Q4: 2 rows, expected 3"
    assert missing[1].message() == "Q4 row 3: missing, expected ('3-MEDIUM', 95)"
    extra = compare(_q(4), Answer(cols, ref + (("4-NOT SPECIFIED", 1),)), Answer(cols, ref))
    assert [p.what for p in extra] == ["rows", "row"]
    assert extra[1].row == 4
    assert compare(_q(4), Answer(("x",), ()), Answer(cols, ref))[0].what == "columns"


def test_an_empty_answer_matches_an_empty_answer() -> None:
    assert compare(_q(17), Answer(("avg_yearly",), ((None,),)), Answer(("avg_yearly",), ((None,),))) == []


# ---------------------------------------------------------------- power, rounds, integrity

def test_power_queries_only_is_the_geometric_mean_formula() -> None:
    times = [0.5] * 11 + [2.0] * 11  # geometric mean 1.0 s
    power, geomean, clamped = tpch.power_queries_only(times, 0.1)
    assert geomean == pytest.approx(1.0)
    assert power == pytest.approx(3600 * 0.1 / 1.0)
    assert clamped == 0
    # clause 5.4.1's 1000x rule: times below max/1000 count as max/1000
    power, geomean, clamped = tpch.power_queries_only([10.0] + [0.001] * 21, 1.0)
    assert clamped == 21
    assert geomean == pytest.approx(math.exp((math.log(10.0) + 21 * math.log(0.01)) / 22))
    assert math.isnan(tpch.power_queries_only([1.0, 0.0], 1.0)[0])


def _round(wrong: int | None = None, failed: int | None = None) -> tpch.RoundResult:
    from wanbench.workloads.tpch_answers import Mismatch

    runs = []
    for pos, n in enumerate(STREAM0_ORDER, 1):
        if n == failed:
            runs.append(tpch.QueryRun(n, pos, {}, 0.02, error="InterfaceError: Lost connection to MySQL server "
                                      "during query", error_code=2013))
            continue
        problems = (Mismatch(n, "value", "got 8972.00, expected 8971.00 (not equal; ...)", 2, "sum_qty",
                             Decimal("8972.00"), Decimal("8971.00"), "exact"),) if n == wrong else ()
        runs.append(tpch.QueryRun(n, pos, {}, 0.01 * n, rows=n, bytes_received=100 * n, value_bytes=50 * n,
                                  checked=True, problems=problems))
    return tpch.RoundResult(0.01, None, tuple(runs), 3.0, reconnects=1 if failed else 0)


def test_a_round_reports_power_failures_and_wrong_answers() -> None:
    r = _round()
    assert r.complete
    assert not r.wrong
    assert r.queries_per_hour == pytest.approx(22 * 3600 / sum(0.01 * n for n in range(1, 23)))
    assert r.power_queries_only == pytest.approx(
        3600 * 0.01 / math.exp(sum(math.log(0.01 * n) for n in range(1, 23)) / 22))
    assert r.bytes_received == sum(100 * n for n in range(1, 23))
    assert r.bytes_source == "tcp_info"
    bad = _round(failed=2)
    assert not bad.complete
    assert math.isnan(bad.power_queries_only)
    assert [q.label for q in bad.failed] == ["Q2"]
    assert "Q2 failed after 0.020s (2013): InterfaceError: Lost connection" in bad.summary()
    assert json.loads(json.dumps(bad.to_json()))["failed"] == ["Q2"]


def test_a_wrong_answer_makes_the_cell_broken() -> None:
    from wanbench.gate.assess import Pending
    from wanbench.gate.baseline import RunCell
    from wanbench.gate.integrity import TPCH_ANSWERS, problems_of
    from wanbench.gate.verdict import BROKEN, decide
    from wanbench.results import CellResult

    def cell(r: tpch.RoundResult) -> CellResult:
        w = tpch.to_workload_result([r])
        return CellResult("t[tpch-sf0.01]", "tpch", "sf0.01", {"kind": "none", "value": 0, "label": "-"}, 1, w)

    assert problems_of(cell(_round()).to_json()) == ()
    assert problems_of(cell(_round(failed=2)).to_json()) == ()  # a failed query is an error, not a wrong answer
    problems = problems_of(cell(_round(wrong=1)).to_json())
    assert [p.code for p in problems] == [TPCH_ANSWERS]
    assert problems[0].message.startswith("TPC-H answers differ from the reference engine's (1 query(s)):\n  Q1 ")
    assert "Q1 row 2, sum_qty: got 8972.00, expected 8971.00" in problems[0].message
    c = RunCell.of(cell(_round(wrong=1)))  # as the gate reads a recorded cell
    v = decide(Pending(c.key, []), alpha=0.05, problems=c.problems)
    assert v.status == BROKEN
    assert TPCH_ANSWERS in v.reasons


def test_to_workload_result_keeps_every_query() -> None:
    w = tpch.to_workload_result([_round(), _round(failed=2)])
    assert w.workload == "tpch"
    assert w.concurrency == 1
    assert [r.queries for r in w.rounds] == [22, 21]
    assert w.errors == 1
    assert w.errors_by_code == {"2013": 1}
    assert w.extra["per_query"]["Q2"]["errors"] == 1
    assert len(w.extra["per_query"]["Q1"]["seconds"]) == 2
    assert w.extra["power_queries_only"][1] is None
    json.dumps(w.extra, allow_nan=False)


def test_result_bytes_come_from_the_sockets_counter() -> None:
    class Proto:
        def __init__(self, sock: socket.socket) -> None:
            self.sock = sock

    class Cnx:
        def __init__(self, sock: socket.socket) -> None:
            self._socket = Proto(sock)

    with socket.create_server(("127.0.0.1", 0)) as srv:
        client = socket.create_connection(srv.getsockname())
        server, _ = srv.accept()
        with client, server:
            before = tpch.socket_bytes_received(Cnx(client))
            assert before is not None
            server.sendall(b"x" * 100_000)
            got = 0
            while got < 100_000:
                got += len(client.recv(65536))
            assert tpch.socket_bytes_received(Cnx(client)) == before + 100_000
    a, b = socket.socketpair()  # a UNIX socket has no TCP counter
    with a, b:
        assert tpch.socket_bytes_received(Cnx(a)) is None
    assert tpch.socket_bytes_received(object()) is None
    assert tpch.value_bytes([("abc", None, 12, Decimal("1.50"))]) == 3 + 1 + 2 + 4


# ---------------------------------------------------------------- the generator's cache

def test_scale_factor_is_validated() -> None:
    assert tpch_data.parse_scale_factor("0.01") == 0.01
    assert tpch_data.sf_label(1.0) == "1"
    assert tpch_data.sf_label(0.1) == "0.1"
    for bad in ("0", "-1", "x", "nan", "2000"):
        with pytest.raises(ConfigError):
            tpch_data.parse_scale_factor(bad)
    assert tpch_data.parts_for(0.01) == 1
    assert tpch_data.parts_for(0.1) == 7
    assert tpch_data.parts_for(1) == 61


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tpch_data.Dataset:
    return tpch_data.generate(0.01, tmp_path_factory.mktemp("tpch-cache"))


def test_generation_writes_the_8_tables_once(generated: tpch_data.Dataset) -> None:
    ds = generated
    assert not ds.reused
    assert ds.seconds > 0
    assert ds.generator.startswith("tpchgen-cli ")
    assert ds.path.name == "sf0.01"
    assert ds.path.parent.name == ds.generator.replace(" ", "-")
    assert ds.rows == {"region": 5, "nation": 25, "supplier": 100, "customer": 1500, "part": 2000, "partsupp": 8000,
                       "orders": 15000, "lineitem": 60175}
    header = ds.paths("lineitem")[0].read_text().splitlines()[0]
    assert header.split(",") == list(tpch_data.table("lineitem").column_names)
    again = tpch_data.generate(0.01, ds.path.parent.parent)
    assert again.reused
    assert again.path == ds.path
    assert again.rows == ds.rows
    assert sorted(p.name for p in ds.path.parent.iterdir()) == ["sf0.01"]  # no scratch left


def _fake_generator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    exe = tmp_path / "tpchgen-cli"
    exe.write_text(f"#!{sys.executable}\nimport sys, pathlib\n"
                   "if sys.argv[1:] == ['--version']:\n    print('tpchgen-cli 0.0.0-fake'); sys.exit(0)\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(tpch_data, "tpchgen_binary", lambda: str(exe))


def test_a_failed_generation_leaves_nothing_that_looks_complete(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_generator(tmp_path, monkeypatch, "out = pathlib.Path(sys.argv[sys.argv.index('-o') + 1])\n"
                    "(out / 'region').mkdir(parents=True)\n"
                    "(out / 'region' / 'region.1.csv').write_text('r_regionkey\\n0\\n')\n"
                    "sys.exit('killed half way')\n")
    cache = tmp_path / "cache"
    with pytest.raises(CommandError, match="killed half way"):
        tpch_data.generate(0.01, cache)
    root = cache / "tpchgen-cli-0.0.0-fake"
    assert list(root.iterdir()) == []  # the scratch directory went with the failure


def test_a_killed_generations_scratch_is_swept_and_a_bare_directory_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wanbench.procs import ProcessHandle
    from wanbench.scratch import OWNER_FILE, PREFIX

    _fake_generator(tmp_path, monkeypatch, "sys.exit('not reached')\n")
    root = tmp_path / "cache" / "tpchgen-cli-0.0.0-fake"
    dead = root / f"{PREFIX}dead"
    (dead / "data" / "lineitem").mkdir(parents=True)
    (dead / "data" / "lineitem" / "lineitem.1.csv").write_text("half")
    ProcessHandle("wanbench run", 2**22 + 1, 1, "gone").save(dead / OWNER_FILE)  # a PID that is not running
    (root / "sf0.01").mkdir()  # a directory without a manifest is not a dataset
    assert tpch_data.Dataset.read(root / "sf0.01") is None
    with pytest.raises(InfrastructureError, match="holds no complete dataset"):
        tpch_data.generate(0.01, tmp_path / "cache")
    assert not dead.exists()


def test_the_cache_directory_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WANBENCH_TPCH_CACHE", str(tmp_path / "c"))
    assert tpch_data.default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("WANBENCH_TPCH_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert tpch_data.default_cache_dir() == tmp_path / "x" / "wanbench" / "tpch"
    assert os.environ.get("WANBENCH_TPCH_CACHE") is None
