"""The seeds' tools as cross-checks (wanbench/seedtools.py, bench/cross_check):
parsing go-tpc's and go-ycsb's real output and ours with the same parsers,
their command lines, go-tpc's histogram buckets, the version stamps, and
running a tool with a Ctrl-C after its duration. No lab, no Go needed."""

from __future__ import annotations

import hashlib
import math
import os
import stat
import sys
from pathlib import Path

import pytest

from wanbench import seedtools as st
from wanbench.errors import InfrastructureError

DATA = Path(__file__).resolve().parent / "data" / "seedtools"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_go_tpc_summary_skips_interval_reports() -> None:
    s = st.parse_tpc_summary(read("go-tpc-v1.0.7-tpcc-run.txt"))
    assert s.tpmc == 4275.5
    no = s.rows["NEW_ORDER"]
    assert (no.count, no.p95_ms, no.p99_ms, no.max_ms) == (1054, 83.9, 151.0, 218.1)  # not a [Current] line
    assert no.mean_ms == pytest.approx(33855.1 / 1054)
    assert set(s.rows) == {"DELIVERY", "NEW_ORDER", "NEW_ORDER_ERR", "ORDER_STATUS", "PAYMENT", "STOCK_LEVEL"}
    assert s.errors == 1
    assert s.transactions == 89 + 1054 + 81 + 972 + 105
    # 4 terminals for ~14.8 s: most of their time inside timed transactions
    assert 0.9 < s.busy_fraction(4) < 1.0


def test_ours_tpcc_summary_parses_alike() -> None:
    s = st.parse_tpc_summary(read("ours-tpcc-summary.txt"))
    assert s.tpmc == 3678.5  # its tpmC line also carries tpmTotal and efficiency
    assert s.rows["NEW_ORDER"].p95_ms == 72.7
    assert s.rows["PAYMENT"].count == 293
    assert s.errors == 0


def test_tpc_summary_without_tpmc_line_uses_new_order_tpm() -> None:
    text = "[Summary] NEW_ORDER - Takes(s): 10.0, Count: 100, TPM: 600.0, Sum(ms): 500.0, 95th(ms): 8.4\n"
    s = st.parse_tpc_summary(text)
    assert s.tpmc == 600.0
    assert s.rows["NEW_ORDER"].p95_ms == 8.4
    assert math.isnan(s.rows["NEW_ORDER"].p99_ms)


def test_tpc_summary_missing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no \\[Summary\\]"):
        st.parse_tpc_summary("execute run failed, err dial tcp 127.0.0.1:1: connect: connection refused\n")


def test_go_ycsb_summary_is_the_block_after_run_finished() -> None:
    text = read("go-ycsb-v1.0.3-run-sigint.txt")
    rows = st.parse_ycsb_summary(text)
    assert set(rows) == {"READ", "TOTAL", "UPDATE", "UPDATE_ERROR"}
    assert rows["READ"].count == 15654
    assert rows["READ"].ops == 1316.4
    assert rows["READ"].p95_us == 9095
    assert rows["UPDATE"].p99_us == 47391
    assert rows["UPDATE"].takes_s == 11.9
    assert rows["UPDATE_ERROR"].count == 16  # the operations cut off by the Ctrl-C, one per thread
    assert "***" in text
    assert "wb_xcheck" in text


def test_ours_ycsb_summary_parses_alike() -> None:
    rows = st.parse_ycsb_summary(read("ours-ycsb-summary.txt"))
    assert set(rows) == {"READ", "UPDATE"}
    assert rows["UPDATE"].ops == 1141.5
    assert rows["UPDATE"].p95_us == 29397


def test_ycsb_summary_needs_its_end() -> None:
    with pytest.raises(ValueError, match="Run finished"):
        st.parse_ycsb_summary("READ   - Takes(s): 5.0, Count: 1, OPS: 0.2\n")


def test_tpch_run_lines() -> None:
    # the shape of go-tpc v1.0.7's tpch output (tpch/workload.go: "%s%s: %.2fs", cmd/go-tpc/misc.go's error line)
    text = ("[Current] Q1: 3.10s\n[2026-11-27 10:00:00] execute run failed, err check q2 failed expect 100 rows, "
            "got 99 rows\nFinished\n[Summary] Q1: 3.10s\n[Summary] Q2: 0.52s\n[Summary] Q10: 12.00s\n")
    seconds, failures = st.parse_tpch_run(text)
    assert seconds == {"Q1": 3.10, "Q2": 0.52, "Q10": 12.0}
    assert len(failures) == 1
    assert "check q2 failed" in failures[0]


@pytest.mark.parametrize(("value", "width"), [(0.5, 0.524288), (10.0, 0.524288), (16.7, 0.524288),
                                               (17.8, 1.048576), (19.9, 1.048576), (33.5, 1.048576),
                                               (40.0, 2.097152), (80.0, 4.194304)])
def test_go_tpc_bucket_width(value: float, width: float) -> None:
    assert st.go_tpc_bucket_ms(value) == pytest.approx(width)


def test_go_tpc_percentiles_are_upper_bucket_edges() -> None:
    # go-tpc's 95th(ms) values seen on the lab (18.9, 19.9, 17.8) are upper edges of 1.05 ms buckets
    unit = (1 << 19) / 1e6
    edges = [round((32 + 2 * k) * unit, 1) for k in range(16)]
    assert {17.8, 18.9, 19.9, 21.0} <= set(edges)


def test_command_lines() -> None:
    t = st.Target("127.0.0.1", 24905, "wb_xcheck", "s3cret", "xcheck_tpcc_gotpc")
    run = st.go_tpc_argv("go-tpc", t, warehouses=1, threads=4, action="run", duration_s=30)
    assert run[:2] == ["go-tpc", "tpcc"]
    assert run[-1] == "run"
    assert run[run.index("--time") + 1] == "30s"
    assert "--ignore-error" in run
    assert run[run.index("-p") + 1] == "s3cret"  # go-tpc has no other way: hence the throwaway user
    prep = st.go_tpc_argv("go-tpc", t, warehouses=2, threads=6, action="prepare")
    assert prep[-1] == "prepare"
    assert "--time" not in prep
    assert prep[prep.index("-T") + 1] == "6"
    with pytest.raises(ValueError, match="duration"):
        st.go_tpc_argv("go-tpc", t, warehouses=1, threads=4, action="run")
    tpch = st.go_tpch_argv("go-tpc", t, scale_factor=1, threads=2, action="run")
    assert tpch[1] == "tpch"
    assert "--check" in tpch
    assert tpch[tpch.index("--count") + 1] == "22"


def test_ycsb_properties_say_what_ours_runs() -> None:
    t = st.Target("127.0.0.1", 24905, "wb_xcheck", "s3cret", "xcheck_ycsb_goycsb")
    props = dict(line.split("=", 1) for line in st.go_ycsb_properties(
        t, workload="workloada", records=10000, threads=16).splitlines())
    assert props["requestdistribution"] == "zipfian"  # go-ycsb's own workloads/workloada says uniform
    assert (props["readproportion"], props["updateproportion"], props["insertproportion"]) == ("0.5", "0.5", "0")
    assert (props["recordcount"], props["threadcount"], props["mysql.password"]) == ("10000", "16", "s3cret")
    e = dict(line.split("=", 1) for line in st.go_ycsb_properties(
        t, workload="workloade", records=10, threads=1).splitlines())
    assert e["scanproportion"] == "0.95"
    assert e["readproportion"] == "0"
    with pytest.raises(ValueError, match="workloadz"):
        st.go_ycsb_properties(t, workload="workloadz", records=10, threads=1)


def test_go_ycsb_version_stamp(tmp_path: Path) -> None:
    binary = tmp_path / "go-ycsb"
    binary.write_bytes(b"\x7fELF not really")
    assert st.go_ycsb_version(str(binary)) == "unknown"
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()
    (tmp_path / "go-ycsb.version").write_text(f"github.com/pingcap/go-ycsb v1.0.3 sha256:{digest}\n")
    assert st.go_ycsb_version(str(binary)) == "v1.0.3"
    binary.write_bytes(b"\x7fELF rebuilt")
    assert st.go_ycsb_version(str(binary)).startswith("unknown")


def test_go_tpc_version_reads_its_release_line(tmp_path: Path) -> None:
    fake = tmp_path / "go-tpc"
    fake.write_text("#!/bin/sh\necho 'Git Commit Hash: none'\necho 'UTC Build Time: unknown'\n"
                    "echo 'Release version: v1.0.7'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert st.go_tpc_version(str(fake)) == "v1.0.7"


def test_run_tool_ctrl_c_after_duration_and_redaction() -> None:
    script = ("import signal, sys, time\n"
              "def stop(*_):\n    print('summary pw=s3cret', flush=True); sys.exit(0)\n"
              "signal.signal(signal.SIGINT, stop)\nprint('started', flush=True)\ntime.sleep(30)\n")
    r = st.run_tool([sys.executable, "-c", script], what="fake tool", timeout=20, stop_after=0.5,
                    redact=lambda s: s.replace("s3cret", "***"))
    assert r.exit_status == 0
    assert r.text.splitlines() == ["started", "summary pw=***"]
    assert 0.4 < r.wall_s < 10
    assert r.cpu_s >= 0
    at = r.first_line_at(r"^summary")
    assert at is not None
    assert at >= 0.4
    assert r.first_line_at("never") is None


def test_run_tool_kills_a_tool_that_overruns() -> None:
    script = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('stuck', flush=True)\n" \
             "time.sleep(60)\n"
    with pytest.raises(InfrastructureError, match="killed after 1 s"):
        st.run_tool([sys.executable, "-c", script], what="stuck tool", timeout=1.0, stop_after=0.2)


def test_tool_path_prefers_bin_then_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(st, "PROJECT_ROOT", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    with pytest.raises(InfrastructureError, match="scripts/setup --cross-check"):
        st.tool_path("go-tpc")
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "go-tpc"
    tool.write_text("#!/bin/sh\n")
    os.chmod(tool, 0o755)
    assert st.tool_path("go-tpc") == str(tool)
