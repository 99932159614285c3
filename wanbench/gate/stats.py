"""Small-sample statistics for the gate, in pure Python (no scipy here).

A gate compares a handful of rounds against a handful of baseline rounds, so
the tests must be honest for n = 3..30: the Mann-Whitney U test is exact for
small samples (a recurrence without ties, a count over mid-rank sums with ties) and
falls back to the normal approximation with tie correction only when the
samples are large. Corrections for many comparisons (Bonferroni, Holm,
Benjamini-Hochberg) and a seeded bootstrap interval on the ratio of medians
complete the toolbox; every function is deterministic.
"""

from __future__ import annotations

import functools
import hashlib
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: above this total sample size the exact test with ties is not computed
MAX_TIED_EXACT_N = 30
#: above this total sample size the tie-free exact recurrence is not used
MAX_EXACT_N = 60


@dataclass(frozen=True)
class MannWhitney:
    """Result of a one-sided Mann-Whitney U test of ``x`` against ``y``.

    ``u`` counts the pairs with x > y (ties count one half); ``p`` is the
    probability, under "same distribution", of a U at least this extreme in
    the tested direction.
    """

    u: float
    p: float
    n_x: int
    n_y: int
    method: str  # exact | enumeration | normal


def log_ratio(worsening: float, higher_is_better: bool) -> float:
    """log(current / reference) of a worsening (``wanbench.gate.baseline.worsening``,
    ``drops_of``); -inf when nothing of the reference is left."""
    ratio = (1.0 - worsening) if higher_is_better else (1.0 + worsening)
    return math.log(ratio) if ratio > 0 else -math.inf


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


@functools.lru_cache(maxsize=512)
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """Arrangement counts of U = 0..m*n for tie-free samples of sizes m, n.

    The largest of all values is either an x (it beats all n y's) or a y
    (it beats nothing): f(m, n, u) = f(m-1, n, u-n) + f(m, n-1, u).
    """
    if m == 0 or n == 0:
        return (1,)
    with_x = _u_counts(m - 1, n)
    with_y = _u_counts(m, n - 1)
    out = [0] * (m * n + 1)
    for u, c in enumerate(with_x):
        out[u + n] += c
    for u, c in enumerate(with_y):
        out[u] += c
    return tuple(out)


def _u_statistic(x: Sequence[float], y: Sequence[float]) -> float:
    return sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y)


def _normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def mann_whitney(x: Sequence[float], y: Sequence[float], alternative: str = "less") -> MannWhitney:
    """One-sided test that ``x`` tends to be smaller (``less``) or larger
    (``greater``) than ``y``."""
    if alternative not in ("less", "greater"):
        raise ValueError(f"alternative must be 'less' or 'greater', not {alternative!r}")
    nx, ny = len(x), len(y)
    if nx == 0 or ny == 0:
        return MannWhitney(math.nan, 1.0, nx, ny, "none")
    u = _u_statistic(x, y)
    pooled = list(x) + list(y)
    has_ties = len(set(pooled)) < len(pooled)
    if not has_ties and nx + ny <= MAX_EXACT_N:
        counts = _u_counts(nx, ny)
        total = sum(counts)
        k = int(round(u))
        tail = sum(counts[: k + 1]) if alternative == "less" else sum(counts[k:])
        return MannWhitney(u, min(1.0, tail / total), nx, ny, "exact")
    if has_ties and nx + ny <= MAX_TIED_EXACT_N:
        return MannWhitney(u, _tied_exact_p(x, y, alternative), nx, ny, "exact-ties")
    n = nx + ny
    mu = nx * ny / 2.0
    tie_term = sum(t**3 - t for t in _tie_sizes(pooled))
    var = nx * ny / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
    if var <= 0:
        return MannWhitney(u, 1.0, nx, ny, "normal")
    sd = math.sqrt(var)
    if alternative == "less":
        p = _normal_cdf((u - mu + 0.5) / sd)
    else:
        p = 1.0 - _normal_cdf((u - mu - 0.5) / sd)
    return MannWhitney(u, min(1.0, max(0.0, p)), nx, ny, "normal")


def _midranks_doubled(values: Sequence[float]) -> list[int]:
    """Twice the mid-rank of each value (integers even when ties share a rank)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = i + j + 2  # 2 * mean of ranks i+1 .. j+1
        i = j + 1
    return ranks


def _tied_exact_p(x: Sequence[float], y: Sequence[float], alternative: str) -> float:
    """Exact permutation p-value of the rank sum with mid-ranks: counts the
    size-len(x) subsets of the pooled scores by their sum (a knapsack)."""
    pooled = list(x) + list(y)
    scores = _midranks_doubled(pooled)
    nx = len(x)
    observed = sum(scores[:nx])
    top = sum(sorted(scores)[-nx:])
    ways = [[0] * (top + 1) for _ in range(nx + 1)]
    ways[0][0] = 1
    for s in scores:
        for k in range(nx, 0, -1):
            row, prev = ways[k], ways[k - 1]
            for total in range(top, s - 1, -1):
                if prev[total - s]:
                    row[total] += prev[total - s]
    dist = ways[nx]
    all_ways = sum(dist)
    tail = sum(dist[: observed + 1]) if alternative == "less" else sum(dist[observed:])
    return min(1.0, tail / all_ways)


def _tie_sizes(values: Sequence[float]) -> list[int]:
    counts: dict[float, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return [c for c in counts.values() if c > 1]


def min_attainable_p(n_x: int, n_y: int) -> float:
    """The smallest one-sided p-value any data can give with these sizes
    (complete separation): 1 / C(n_x + n_y, n_x) when exact."""
    if n_x == 0 or n_y == 0:
        return 1.0
    if n_x + n_y <= MAX_EXACT_N:
        return 1.0 / math.comb(n_x + n_y, n_x)
    mu = n_x * n_y / 2.0
    sd = math.sqrt(n_x * n_y * (n_x + n_y + 1) / 12.0)
    return _normal_cdf((0 - mu + 0.5) / sd)


def bonferroni(pvalues: Sequence[float]) -> list[float]:
    m = len(pvalues)
    return [min(1.0, p * m) for p in pvalues]


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (family-wise error control)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """BH adjusted p-values (false-discovery-rate control)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i], reverse=True)
    adjusted = [1.0] * m
    running = 1.0
    for pos, i in enumerate(order):
        rank = m - pos
        running = min(running, pvalues[i] * m / rank)
        adjusted[i] = min(1.0, running)
    return adjusted


CORRECTIONS = {"holm": holm, "bonferroni": bonferroni, "bh": benjamini_hochberg, "none": lambda p: list(p)}


def _seed(*samples: Sequence[float]) -> int:
    text = "|".join(",".join(repr(float(v)) for v in s) for s in samples)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def bootstrap_ratio_ci(
    x: Sequence[float], y: Sequence[float], *, level: float = 0.95, resamples: int = 1000
) -> tuple[float, float]:
    """Percentile bootstrap interval of median(x) / median(y).

    Seeded from the data, so the same samples always give the same interval.
    With a handful of rounds it is optimistic; the gate reports it and uses
    it for the "smallest detectable change", never as the only evidence.
    """
    if len(x) < 2 or len(y) < 2:
        return (math.nan, math.nan)
    rng = random.Random(_seed(x, y))
    ratios = []
    for _ in range(resamples):
        mx = statistics.median(rng.choices(x, k=len(x)))
        my = statistics.median(rng.choices(y, k=len(y)))
        if my != 0:
            ratios.append(mx / my)
    if not ratios:
        return (math.nan, math.nan)
    ratios.sort()
    lo_i = int(math.floor((1 - level) / 2 * (len(ratios) - 1)))
    hi_i = int(math.ceil((1 + level) / 2 * (len(ratios) - 1)))
    return (ratios[lo_i], ratios[hi_i])


# ---------------------------------------------------------------- Welch t


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def student_t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t > 0 else 1.0 - tail


@dataclass(frozen=True)
class WelchT:
    t: float
    df: float
    p: float
    method: str = "welch-t-log"


def welch_t(x: Sequence[float], y: Sequence[float], alternative: str = "less", *, log: bool = True) -> WelchT:
    """One-sided Welch t-test of mean(x) against mean(y), on log values by
    default (rates and latencies are multiplicative; the ratio is what a
    budget limits). Used only where the rank test cannot reach the alpha at
    all with so few rounds; assumes roughly log-normal rounds."""
    if alternative not in ("less", "greater"):
        raise ValueError(f"alternative must be 'less' or 'greater', not {alternative!r}")
    if len(x) < 2 or len(y) < 2:
        return WelchT(math.nan, math.nan, 1.0)
    if log and (min(x) <= 0 or min(y) <= 0):
        log = False
    fx = [math.log(v) for v in x] if log else list(x)
    fy = [math.log(v) for v in y] if log else list(y)
    mx, my = statistics.fmean(fx), statistics.fmean(fy)
    vx, vy = statistics.variance(fx) / len(fx), statistics.variance(fy) / len(fy)
    se2 = vx + vy
    if se2 == 0:
        diff = mx - my
        p = 0.5 if diff == 0 else (0.0 if (diff < 0) == (alternative == "less") else 1.0)
        return WelchT(math.copysign(math.inf, diff) if diff else 0.0, math.inf, p)
    t = (mx - my) / math.sqrt(se2)
    df = se2**2 / ((vx**2 / (len(fx) - 1)) + (vy**2 / (len(fy) - 1)))
    p = student_t_sf(-t, df) if alternative == "less" else student_t_sf(t, df)
    return WelchT(t, df, min(1.0, max(0.0, p)))


# ---------------------------------------------------------------- noise floor

_STD_NORMAL = statistics.NormalDist()


def best_detection(noise_sd: float, drop: float, false_positives: float = 0.05) -> float:
    """The highest detection rate of a ``drop`` (fraction of QPS) that any
    rule comparing one batch with another can reach at the given
    false-positive rate, when same-code batches differ by a shift of
    ``noise_sd`` (standard deviation of the log ratio of their medians).

    Such a shift moves every round of a batch together, so no statistic of
    the two batches can tell it from a real change: the best rule flags a log
    drop above the (1 - false_positives) quantile of the same-code shifts.
    """
    if noise_sd <= 0:
        return 1.0
    shift = -math.log1p(-drop)
    threshold = _STD_NORMAL.inv_cdf(1.0 - false_positives) * noise_sd
    return _STD_NORMAL.cdf((shift - threshold) / noise_sd)


def flag_floor(noise_sd: float, false_positives: float = 0.05) -> float:
    """The smallest drop (fraction) a rule may flag and still keep its
    false-positive rate: same-code shifts of ``noise_sd`` exceed anything
    smaller more often than ``false_positives``."""
    return -math.expm1(-_STD_NORMAL.inv_cdf(1.0 - false_positives) * noise_sd)


def noise_sd_needed(drop: float, false_positives: float = 0.05, detection: float = 0.90) -> float:
    """The largest same-code shift (sd of the log ratio) at which a ``drop``
    can still be detected with ``detection`` probability (see ``best_detection``)."""
    z = _STD_NORMAL.inv_cdf(1.0 - false_positives) + _STD_NORMAL.inv_cdf(detection)
    return -math.log1p(-drop) / z


# ---------------------------------------------------------------- runs as the unit


def student_t_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t (``df`` degrees of freedom), by
    bisection on ``student_t_sf``: a handful of calls per verdict."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile must be in (0, 1), not {q!r}")
    if q < 0.5:
        return -student_t_ppf(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while student_t_sf(hi, df) > 1.0 - q:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if student_t_sf(mid, df) > 1.0 - q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class RunTest:
    """Two groups of whole runs (one summary value per run) compared with a
    pooled-variance t-test: the spread that matters is between runs, so
    rounds inside one run never count as independent observations."""

    diff: float  # mean(current) - mean(reference), on the tested scale
    se: float  # standard error of that difference
    df: int
    t: float
    p_less: float  # current below the reference
    p_greater: float

    def critical(self, alpha: float) -> float:
        """The smallest |diff| (on the tested scale) this pair could flag at ``alpha`` one-sided."""
        if self.df < 1 or math.isnan(self.se):
            return math.inf
        return student_t_ppf(1.0 - alpha, self.df) * self.se


def run_t_test(current: Sequence[float], reference: Sequence[float], *, log: bool,
               sd_floor: float = 0.0) -> RunTest:
    """Pooled two-sample t over run summaries. Needs at least two reference
    runs (one current run is enough: the reference runs give the spread).
    ``log`` for rates and latencies, whose changes are ratios. ``sd_floor``
    (on the tested scale) is the least spread between runs assumed, however
    closely the given runs agree."""
    if len(reference) < 2 or not current:
        return RunTest(math.nan, math.nan, 0, math.nan, 1.0, 1.0)
    if log and (min(current) <= 0 or min(reference) <= 0):
        log = False
    fx = [math.log(v) for v in current] if log else [float(v) for v in current]
    fy = [math.log(v) for v in reference] if log else [float(v) for v in reference]
    mx, my = statistics.fmean(fx), statistics.fmean(fy)
    ss = sum((v - mx) ** 2 for v in fx) + sum((v - my) ** 2 for v in fy)
    df = len(fx) + len(fy) - 2
    se = math.sqrt(max(ss / df, sd_floor**2) * (1.0 / len(fx) + 1.0 / len(fy)))
    diff = mx - my
    if se == 0:
        p_less = 0.5 if diff == 0 else (0.0 if diff < 0 else 1.0)
        return RunTest(diff, 0.0, df, math.copysign(math.inf, diff) if diff else 0.0, p_less, 1.0 - p_less)
    t = diff / se
    return RunTest(diff, se, df, t, student_t_sf(-t, df), student_t_sf(t, df))


def geometric_mean(values: Sequence[float]) -> float:
    """The centre of run summaries of a rate or latency (their changes are ratios)."""
    if not values:
        return math.nan
    if min(values) <= 0:
        return statistics.fmean(values)
    return math.exp(statistics.fmean(math.log(v) for v in values))
