"""YCSB's key math in Python: key names (``CoreWorkload.buildKeyName`` with
FNV-1a 64), zeta, the key space of the scrambled zipfian, and the exact
probability of every item of the zipfian head.

``wanbench/lua/ycsb.lua`` does the same in LuaJIT for the load generator;
this half names the keys for the correctness checks and gives the theory the
distribution self-test compares a real run with.
"""

from __future__ import annotations

import math

FNV_OFFSET_BASIS_64 = 0xCBF29CE484222325
FNV_PRIME_64 = 1099511628211
_MASK = (1 << 64) - 1
ZIPFIAN_CONSTANT = 0.99
SCRAMBLE_ITEM_COUNT = 10_000_000_000  # ScrambledZipfianGenerator.ITEM_COUNT
SCRAMBLE_ZETAN = 26.46902820178302  # ScrambledZipfianGenerator.ZETAN: zeta(10^10, 0.99)


def fnvhash64(val: int) -> int:
    """YCSB's ``Utils.fnvhash64``: FNV-1a over 8 bytes, then ``Math.abs`` of
    the signed 64-bit result."""
    h = FNV_OFFSET_BASIS_64
    for _ in range(8):
        h ^= val & 0xFF
        val >>= 8
        h = (h * FNV_PRIME_64) & _MASK
    if h >= 1 << 63:
        h = (1 << 64) - h
    return h


def key_name(keynum: int) -> str:
    """``CoreWorkload.buildKeyName`` with insertorder=hashed, zeropadding=1."""
    return f"user{fnvhash64(keynum)}"


def zeta(n: int, theta: float = ZIPFIAN_CONSTANT) -> float:
    return math.fsum(1.0 / (i + 1) ** theta for i in range(n))


def expected_new_keys(insert_proportion: float, operations: int) -> int:
    """``CoreWorkload``: ``(int) (opcount * insertproportion * 2.0)``."""
    return int(operations * insert_proportion * 2.0)


def key_space(records: int, insert_proportion: float, operations: int) -> int:
    """Items of ``ScrambledZipfianGenerator(0, records + expectednewkeys)``."""
    return records + expected_new_keys(insert_proportion, operations) + 1


def zipfian_item_probabilities(head: int, *, items: int = SCRAMBLE_ITEM_COUNT + 1,
                               zetan: float = SCRAMBLE_ZETAN) -> list[float]:
    """Exact probability of items 0..head-1 of YCSB's ``ZipfianGenerator``
    (Gray et al.'s inverse: item >= j iff u >= u_j, items 0 and 1 by zeta)."""
    theta = ZIPFIAN_CONSTANT
    alpha = 1.0 / (1.0 - theta)
    zeta2 = 1.0 + 0.5 ** theta
    eta = (1 - (2.0 / items) ** (1 - theta)) / (1 - zeta2 / zetan)
    p0 = 1.0 / zetan
    p1 = (0.5 ** theta) / zetan
    first_formula = (1.0 + 0.5 ** theta) / zetan  # u below this is item 0 or 1

    def u_at_least(j: int) -> float:  # smallest u whose formula gives >= j
        return ((j / items) ** (1.0 / alpha) - 1.0 + eta) / eta

    probs = [p0, p1]
    for j in range(2, head):
        lo = max(first_formula, u_at_least(j))
        hi = max(first_formula, u_at_least(j + 1))
        probs.append(max(0.0, min(1.0, hi) - min(1.0, lo)))
    return probs[:head]


def scrambled_key_shares(records: int, space: int, *, head: int = 200_000) -> dict[int, float]:
    """Expected share of each key of a scrambled-zipfian run over ``records``
    keys (no inserts): the head items land on ``fnvhash64(item) % space``;
    the rest of the mass is spread evenly (the hash scrambles it); draws
    beyond the last record are drawn again, so shares are renormalised."""
    probs = zipfian_item_probabilities(head)
    shares = dict.fromkeys(range(records), 0.0)
    tail = 1.0 - math.fsum(probs)
    for item, p in enumerate(probs):
        k = fnvhash64(item) % space
        if k < records:
            shares[k] += p
    for k in shares:
        shares[k] += tail / space
    total = math.fsum(shares.values())
    return {k: v / total for k, v in shares.items()}
