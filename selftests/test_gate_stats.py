"""The gate's statistics: exact small-sample p-values, corrections, bootstrap."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from wanbench.gate import stats


def brute_force_p(x: list[float], y: list[float], alternative: str) -> float:
    """The permutation distribution of U, by listing every split of the pool."""
    pooled = x + y
    u0 = stats._u_statistic(x, y)
    hits = total = 0
    for idx in itertools.combinations(range(len(pooled)), len(x)):
        chosen = set(idx)
        xs = [pooled[i] for i in idx]
        ys = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        u = stats._u_statistic(xs, ys)
        total += 1
        hits += (u <= u0 + 1e-9) if alternative == "less" else (u >= u0 - 1e-9)
    return hits / total


def test_exact_p_of_complete_separation_is_one_over_the_splits() -> None:
    res = stats.mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], "less")
    assert res.method == "exact"
    assert res.p == pytest.approx(1 / 252)
    assert stats.min_attainable_p(5, 5) == pytest.approx(1 / 252)
    assert stats.mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], "greater").p == pytest.approx(1.0)


def test_exact_table_value_n5_n5() -> None:
    # Published critical value: one-sided alpha 0.05 for n1 = n2 = 5 is U <= 4 (P = 0.0476).
    x = [1, 2, 3, 4, 8.5]
    y = [5, 6, 7, 8, 9]
    res = stats.mann_whitney(x, y, "less")
    assert res.u == 4
    assert res.p == pytest.approx(12 / 252)


@pytest.mark.parametrize("seed", range(12))
def test_exact_with_and_without_ties_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    x = [float(rng.randint(0, 6)) for _ in range(rng.randint(2, 6))]
    y = [float(rng.randint(0, 6)) for _ in range(rng.randint(2, 7))]
    for alternative in ("less", "greater"):
        assert stats.mann_whitney(x, y, alternative).p == pytest.approx(brute_force_p(x, y, alternative))


def test_normal_approximation_is_close_to_exact_for_moderate_samples() -> None:
    rng = random.Random(7)
    x = [rng.gauss(0, 1) for _ in range(30)]
    y = [rng.gauss(0.5, 1) for _ in range(35)]
    approx = stats.mann_whitney(x, y, "less")
    assert approx.method == "normal"
    exact_counts = stats._u_counts(30, 35)
    exact = sum(exact_counts[: int(approx.u) + 1]) / sum(exact_counts)
    assert approx.p == pytest.approx(exact, rel=0.05)


def test_normal_approximation_corrects_for_ties() -> None:
    x = [1.0] * 20 + [2.0] * 20
    y = [2.0] * 20 + [3.0] * 20
    res = stats.mann_whitney(x, y, "less")
    assert res.method == "normal"
    assert res.p < 1e-4


def test_empty_sample_gives_no_evidence() -> None:
    assert stats.mann_whitney([], [1.0, 2.0]).p == 1.0


def test_holm_and_bh_adjustments() -> None:
    p = [0.01, 0.04, 0.03, 0.5]
    assert stats.holm(p) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert stats.bonferroni(p) == pytest.approx([0.04, 0.16, 0.12, 1.0])
    assert stats.benjamini_hochberg(p) == pytest.approx([0.04, 0.04 * 4 / 3, 0.04 * 4 / 3, 0.5])


def test_bootstrap_interval_is_deterministic_and_covers_the_ratio() -> None:
    x = [90.0, 95.0, 100.0, 102.0, 98.0]
    y = [100.0, 105.0, 110.0, 108.0, 101.0]
    lo, hi = stats.bootstrap_ratio_ci(x, y)
    assert (lo, hi) == stats.bootstrap_ratio_ci(x, y)
    assert lo <= stats.median(x) / stats.median(y) <= hi
    assert math.isnan(stats.bootstrap_ratio_ci([1.0], y)[0])


@pytest.mark.parametrize(
    ("t", "df", "expected"),
    [(2.0, 10, 0.036694), (1.0, 5, 0.181609), (3.0, 2, 0.047733), (-1.5, 7, 0.911351), (0.0, 4, 0.5)],
)
def test_student_t_tail_matches_tables(t: float, df: float, expected: float) -> None:
    assert stats.student_t_sf(t, df) == pytest.approx(expected, abs=1e-5)


def test_welch_t_on_raw_and_log_values() -> None:
    raw = stats.welch_t([1, 2, 3, 4], [3, 4, 5, 6], "less", log=False)
    assert raw.t == pytest.approx(-2.19089, rel=1e-5)
    assert raw.df == pytest.approx(6.0)
    assert raw.p == pytest.approx(0.035494, abs=1e-5)
    ratio = stats.welch_t([90.0, 91.0, 89.5], [100.0, 101.0, 99.0], "less")
    assert ratio.p < 1e-3
    assert stats.welch_t([100.0, 101.0, 99.0], [90.0, 91.0, 89.5], "less").p > 0.99
    assert stats.welch_t([1.0], [2.0, 3.0]).p == 1.0


def test_noise_floor_formulas_agree_with_each_other_and_a_simulation() -> None:
    needed = stats.noise_sd_needed(0.10, 0.05, 0.90)
    assert needed == pytest.approx(math.log(1 / 0.9) / (1.6449 + 1.2816), rel=1e-3)
    assert stats.best_detection(needed, 0.10, 0.05) == pytest.approx(0.90, abs=1e-9)
    assert stats.best_detection(needed * 1.4, 0.10, 0.05) < 0.90 < stats.best_detection(needed * 0.7, 0.10, 0.05)
    assert stats.best_detection(0.0, 0.10) == 1.0
    # the flag floor is the same-code shift exceeded 5 % of the time
    rng = random.Random(7)
    sd = 0.05
    shifts = [rng.gauss(0.0, sd) for _ in range(20000)]
    floor = stats.flag_floor(sd, 0.05)
    assert floor == pytest.approx(1 - math.exp(-1.6449 * sd), rel=1e-3)
    beyond = sum(1 for s in shifts if -math.expm1(s) > floor) / len(shifts)
    assert beyond == pytest.approx(0.05, abs=0.006)
    # and the best rule, "flag drops beyond the floor", catches 10 % drops as predicted
    caught = sum(1 for s in shifts if -math.expm1(s + math.log(0.9)) > floor) / len(shifts)
    assert caught == pytest.approx(stats.best_detection(sd, 0.10, 0.05), abs=0.01)


@pytest.mark.parametrize(("q", "df", "expected"), [(0.95, 4, 2.1318), (0.975, 10, 2.2281), (0.99, 2, 6.9646),
                                                   (0.05, 3, -2.3534)])
def test_student_t_quantiles_match_the_tables(q: float, df: int, expected: float) -> None:
    assert stats.student_t_ppf(q, df) == pytest.approx(expected, abs=1e-3)


def test_run_t_test_treats_each_run_as_one_observation() -> None:
    """Known answer: runs 100, 102, 98, 101, 99 against one run at 90 on the log scale."""
    t = stats.run_t_test([90.0], [100.0, 102.0, 98.0, 101.0, 99.0], log=True)
    assert t.df == 4
    assert t.diff == pytest.approx(math.log(90) - sum(map(math.log, (100, 102, 98, 101, 99))) / 5)
    assert t.p_less == pytest.approx(0.00185, abs=1e-4)  # t = -6.08, df 4
    assert t.p_greater > 0.99
    assert stats.run_t_test([90.0], [100.0], log=True).p_less == 1.0  # one accepted run: no spread, no test


def test_run_t_test_false_positive_rate_is_alpha_on_simulated_runs() -> None:
    rnd = random.Random(7)
    hits = 0
    trials = 4000
    for _ in range(trials):
        base = [math.exp(rnd.gauss(0, 0.05)) for _ in range(5)]
        cur = [math.exp(rnd.gauss(0, 0.05))]
        hits += stats.run_t_test(cur, base, log=True).p_less <= 0.05
    assert 0.035 <= hits / trials <= 0.065
