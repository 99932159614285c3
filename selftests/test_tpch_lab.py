"""TPC-H on the lab's MariaDB at SF 0.01: generate, load, run the 22 queries
of stream 0 and check every answer against DuckDB; a load that is already
there is not repeated; INSERT where LOAD DATA LOCAL is refused; a connection
reset while a result is written fails that query alone; a wrong value in
the database is named as a wrong answer and makes the cell broken; a query
whose connection is killed, or that runs out of time, fails alone too.

The module starts its own lab (ports from 31300) and generates into a
temporary cache, so it needs nothing else.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selftests.labutil import free_port_base
from wanbench.faults.toxiproxy import TOXIC_PREFIX
from wanbench.profiles.lab.servers import Lab
from wanbench.sql import SqlTarget
from wanbench.wait import wait_for
from wanbench.workloads import tpch, tpch_answers, tpch_data, tpch_load

pytestmark = pytest.mark.lab

SF = 0.01
CUT = f"{TOXIC_PREFIX}tpchtest-cut"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with Lab(tmp_path_factory.mktemp("tpchlab") / "lab", free_port_base(31300, 31399)) as started:
        yield started


@pytest.fixture(scope="module")
def target(lab: Lab) -> SqlTarget:
    host, port = lab.endpoint("direct")  # client -> Toxiproxy -> MariaDB primary
    cred = lab.credentials
    return SqlTarget(host, port, cred.user, cred.password, tpch_load.DATABASE)


@pytest.fixture(scope="module")
def prepared(target: SqlTarget, tmp_path_factory: pytest.TempPathFactory) -> tpch_load.Prepared:
    start = time.monotonic()
    p = tpch_load.prepare(target, SF, cache_dir=tmp_path_factory.mktemp("tpch-cache"))
    print(f"\n{p.summary()} ({time.monotonic() - start:.1f}s in all)")
    return p


@pytest.fixture(scope="module")
def reference(prepared: tpch_load.Prepared) -> Iterator[tpch_answers.Reference]:
    with tpch_answers.Reference(prepared.dataset) as ref:
        yield ref


def _assert_all_right(r: tpch.RoundResult) -> None:
    __tracebackhide__ = True
    bad = [q.describe() for q in r.queries if not q.ok or not q.checked or q.problems]
    problems = [p.message() for q in r.queries for p in q.problems]
    assert not bad, "\n".join(bad + problems)


def test_a_round_of_22_queries_matches_duckdb(prepared: tpch_load.Prepared, target: SqlTarget,
                                              reference: tpch_answers.Reference) -> None:
    load = prepared.load
    assert not load.reused
    assert load.method == "load_data_local"
    assert [t.table for t in load.tables] == list(tpch_data.TABLE_NAMES)
    assert {t.table: t.rows for t in load.tables} == dict(prepared.dataset.rows)
    for seed in (None, 11):
        r = tpch.run_round(target, SF, seed=seed, reference=reference)
        print(r.summary())
        _assert_all_right(r)
        assert [q.number for q in r.queries] == list(tpch.STREAM0_ORDER)
        assert r.complete
        assert r.reconnects == 0
        assert r.power_queries_only > 0
        assert all(q.bytes_received and q.bytes_received > q.value_bytes for q in r.queries), \
            [(q.label, q.bytes_received, q.value_bytes) for q in r.queries]
        assert len({q.connection_id for q in r.queries}) == 1  # one connection
    assert tpch.to_workload_result([r]).extra["checks"][0]["passed"] is True


def test_a_load_that_is_there_is_not_repeated(prepared: tpch_load.Prepared, target: SqlTarget) -> None:
    again = tpch_load.ensure_loaded(target, prepared.dataset)
    assert again.reused
    # a row gone (the counts no longer match the generator's): loaded again
    _sql(target, "DELETE FROM region WHERE r_regionkey = 4")
    assert not tpch_load.is_loaded(target, prepared.dataset)
    assert not tpch_load.ensure_loaded(target, prepared.dataset).reused
    # a load killed before its marker was written: loaded again
    _sql(target, f"DROP TABLE {tpch_load.MARKER_TABLE}")
    assert not tpch_load.ensure_loaded(target, prepared.dataset).reused
    assert tpch_load.ensure_loaded(target, prepared.dataset).reused


def test_insert_where_load_data_local_is_refused(lab: Lab, prepared: tpch_load.Prepared, target: SqlTarget,
                                                 reference: tpch_answers.Reference) -> None:
    other = dataclasses.replace(target, database="wanbench_tpch_insert")
    lab.mariadb.run("primary", "SET GLOBAL local_infile = 0")
    try:
        res = tpch_load.ensure_loaded(other, prepared.dataset)
    finally:
        lab.mariadb.run("primary", "SET GLOBAL local_infile = 1")
    assert res.method == "insert"
    assert {t.table: t.rows for t in res.tables} == dict(prepared.dataset.rows)
    assert tpch_load.is_loaded(other, prepared.dataset)
    r = tpch.run_round(other, SF, reference=reference)
    _assert_all_right(r)
    _sql(other, "DROP DATABASE wanbench_tpch_insert")


class _CutDuringQ2(tpch.RoundHooks):
    """Toxiproxy's limit_data on the client link: the connection is closed after
    200 bytes of query 2's result, as seed 004's server reset it while writing."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    def before_query(self, number: int, connection_id: int | None) -> None:
        if number == 2:
            self.lab.toxiproxy.add_toxic("client_primary", CUT, "limit_data", "downstream", {"bytes": 200})

    def after_query(self, run: tpch.QueryRun) -> None:
        if run.number == 2:
            self.lab.toxiproxy.delete_toxic("client_primary", CUT)


def test_a_reset_while_a_result_is_written_fails_that_query_only(lab: Lab, prepared: tpch_load.Prepared,
                                                                 target: SqlTarget,
                                                                 reference: tpch_answers.Reference) -> None:
    try:
        r = tpch.run_round(target, SF, reference=reference, hooks=_CutDuringQ2(lab))
    finally:
        lab.toxiproxy.delete_toxic("client_primary", CUT)
    print(r.summary())
    assert [q.label for q in r.failed] == ["Q2"]
    (q2,) = r.failed
    assert q2.error_code in (2013, 2055), q2.describe()
    assert "Lost connection" in q2.error
    assert q2.describe().startswith("Q2 failed after ")
    _assert_all_right(dataclasses.replace(r, queries=tuple(q for q in r.queries if q.number != 2)))
    assert r.reconnects == 1
    before, after = r.queries[0], r.queries[2]  # Q14 ran before Q2, Q9 after it
    assert (before.number, after.number) == (14, 9)
    assert before.connection_id != after.connection_id  # a fresh connection after the failure
    assert not r.complete
    assert r.power_queries_only != r.power_queries_only  # NaN: the power metric needs all 22


class _HoldQ9(tpch.RoundHooks):
    """Q9 waits on a table lock (``LOCK TABLES part WRITE`` from a second
    connection) until it is killed (``KILL <its connection id>`` once the
    server shows it waiting) or its time runs out; the lock goes after Q9."""

    def __init__(self, target: SqlTarget, *, kill: bool) -> None:
        self.target = target
        self.kill = kill
        self.locker: Any = None
        self.killer: threading.Thread | None = None
        self.killed: list[int] = []

    def before_query(self, number: int, connection_id: int | None) -> None:
        if number != 9:
            return
        self.locker = self.target.connect(who="test locker")
        self.locker.cursor().execute("LOCK TABLES part WRITE")
        if self.kill:
            assert connection_id is not None
            self.killer = threading.Thread(target=self._kill, args=(connection_id,), daemon=True)
            self.killer.start()

    def _kill(self, cid: int) -> None:
        cnx = self.target.connect(who="test killer")
        try:
            cur = cnx.cursor()

            def waiting() -> bool:
                cur.execute("SELECT STATE FROM information_schema.PROCESSLIST WHERE ID = %s", (cid,))
                row = cur.fetchone()
                return bool(row and "metadata lock" in str(row[0]))

            wait_for(waiting, what=f"Q9 (connection {cid}) to wait on the table lock", timeout=20)
            cur.execute(f"KILL {cid}")
            self.killed.append(cid)
        finally:
            cnx.close()

    def after_query(self, run: tpch.QueryRun) -> None:
        if run.number == 9:
            self.release()

    def release(self) -> None:
        if self.killer is not None:
            self.killer.join(timeout=30)
        if self.locker is not None:
            locker, self.locker = self.locker, None
            locker.cursor().execute("UNLOCK TABLES")
            locker.close()


@pytest.mark.parametrize("how", ["kill", "timeout"])
def test_a_killed_or_timed_out_query_fails_alone(how: str, prepared: tpch_load.Prepared, target: SqlTarget,
                                                reference: tpch_answers.Reference) -> None:
    hold = _HoldQ9(target, kill=how == "kill")
    try:
        r = tpch.run_round(target, SF, reference=reference, hooks=hold, query_timeout=3)
    finally:
        hold.release()
    print(r.summary())
    assert [q.label for q in r.failed] == ["Q9"], r.summary()
    (q9,) = r.failed
    if how == "kill":
        assert hold.killed == [q9.connection_id]
        assert q9.error_code in (2013, 2055, 1927), q9.describe()  # lost connection, or "Connection was killed"
    else:  # the server's max_statement_time (1969) or the client's read timeout, whichever ends it first
        assert q9.seconds == pytest.approx(3.0, abs=1.5)
        assert q9.error_code in (1969, 2013, 3024, 4031) or "timed out" in q9.error.lower(), q9.describe()
    _assert_all_right(dataclasses.replace(r, queries=tuple(q for q in r.queries if q.number != 9)))
    assert r.reconnects == 1


def test_a_wrong_value_is_a_wrong_answer_and_a_broken_cell(prepared: tpch_load.Prepared, target: SqlTarget,
                                                           reference: tpch_answers.Reference) -> None:
    from wanbench.gate.integrity import TPCH_ANSWERS, problems_of
    from wanbench.results import CellResult

    # lineitem (1, 1) ships 1996-03-13 with flags N/O: Q1's third group
    _sql(target, "UPDATE lineitem SET l_quantity = l_quantity + 1 WHERE l_orderkey = 1 AND l_linenumber = 1")
    try:
        r = tpch.run_round(target, SF, reference=reference, order=(1, 6))
    finally:
        _sql(target, "UPDATE lineitem SET l_quantity = l_quantity - 1 WHERE l_orderkey = 1 AND l_linenumber = 1")
    (q1,) = [q for q in r.queries if q.number == 1]
    assert [(p.row, p.column) for p in q1.problems] == [(3, "sum_qty")]
    p = q1.problems[0]
    assert p.got == p.expected + 1
    assert p.message().startswith(f"Q1 row 3, sum_qty: got {p.got}, expected {p.expected} (not equal")
    cell = CellResult("t[tpch]", "tpch", "sf0.01", {"kind": "none", "value": 0, "label": "-"}, 1,
                      tpch.to_workload_result([r]))
    (problem,) = problems_of(cell.to_json())
    assert problem.code == TPCH_ANSWERS
    assert "Q1 row 3, sum_qty" in problem.message
    _assert_all_right(tpch.run_round(target, SF, reference=reference, order=(1,)))  # restored


def _sql(target: SqlTarget, *stmts: str) -> None:
    cnx = target.connect(who="test")
    try:
        cur = cnx.cursor()
        for s in stmts:
            cur.execute(s)
        cur.close()
    finally:
        cnx.close()


def test_the_reference_database_is_built_once(prepared: tpch_load.Prepared) -> None:
    path = tpch_answers.reference_path(prepared.dataset)
    assert path == prepared.dataset.path / tpch_answers.REFERENCE_FILE
    assert sorted(p.name for p in Path(prepared.dataset.path).iterdir() if p.name.startswith(".")) == []
