"""The 22 TPC-H queries and their substitution parameters (clause 2.4).

Each query's text lives in one file, ``tpch_sql/qNN.sql`` (MySQL/TiDB
dialect, which DuckDB, the answer checker, also runs unchanged), with a
header that says how its answer is compared::

    -- Q3 Shipping Priority (TPC-H clause 2.4.3)
    -- answer: exact sum exact exact      one rule of clause 2.1.3.5 per column
    -- order: 2 3                          the ORDER BY keys, as result columns

Parameters are ``$NAME`` markers. ``validation_params`` gives the values of
clause 2.4.x.4 (qgen -d), ``random_params`` draws them from a seed with the
ranges of clause 2.4.x.3 (qgen's rules, written again here; not qgen's
random numbers). Q15's view is a common table expression: a round runs no DDL.
"""

from __future__ import annotations

import datetime
import functools
import random
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wanbench.errors import ConfigError

SQL_DIR = Path(__file__).resolve().parent / "tpch_sql"

#: the power test's query order for stream 0 (TPC-H Appendix A)
STREAM0_ORDER: tuple[int, ...] = (14, 2, 9, 20, 6, 17, 18, 8, 21, 13, 3, 22, 16, 4, 11, 15, 1, 10, 19, 5, 7, 12)

#: answer comparison rules of clause 2.1.3.5, one per result column (see tpch_answers)
KINDS = ("exact", "ratio", "sum", "avg")

# ---------------------------------------------------------------- the spec's word lists (clauses 4.2.2.13, 4.2.3)

REGIONS = ("AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST")
#: N_NAME -> its R_NAME (clause 4.2.3)
NATIONS: Mapping[str, str] = {
    "ALGERIA": "AFRICA", "ARGENTINA": "AMERICA", "BRAZIL": "AMERICA", "CANADA": "AMERICA", "EGYPT": "MIDDLE EAST",
    "ETHIOPIA": "AFRICA", "FRANCE": "EUROPE", "GERMANY": "EUROPE", "INDIA": "ASIA", "INDONESIA": "ASIA",
    "IRAN": "MIDDLE EAST", "IRAQ": "MIDDLE EAST", "JAPAN": "ASIA", "JORDAN": "MIDDLE EAST", "KENYA": "AFRICA",
    "MOROCCO": "AFRICA", "MOZAMBIQUE": "AFRICA", "PERU": "AMERICA", "CHINA": "ASIA", "ROMANIA": "EUROPE",
    "SAUDI ARABIA": "MIDDLE EAST", "VIETNAM": "ASIA", "RUSSIA": "EUROPE", "UNITED KINGDOM": "EUROPE",
    "UNITED STATES": "AMERICA",
}
TYPE_SYLLABLES = (
    ("STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO"),
    ("ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED"),
    ("TIN", "NICKEL", "BRASS", "STEEL", "COPPER"),
)
CONTAINER_SYLLABLES = (
    ("SM", "LG", "MED", "JUMBO", "WRAP"),
    ("CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM"),
)
SEGMENTS = ("AUTOMOBILE", "BUILDING", "FURNITURE", "MACHINERY", "HOUSEHOLD")
SHIP_MODES = ("REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB")
#: the words P_NAME is made of (clause 4.2.3)
COLORS = (
    "almond", "antique", "aquamarine", "azure", "beige", "bisque", "black", "blanched", "blue", "blush", "brown",
    "burlywood", "burnished", "chartreuse", "chiffon", "chocolate", "coral", "cornflower", "cornsilk", "cream",
    "cyan", "dark", "deep", "dim", "dodger", "drab", "firebrick", "floral", "forest", "frosted", "gainsboro",
    "ghost", "goldenrod", "green", "grey", "honeydew", "hot", "indian", "ivory", "khaki", "lace", "lavender",
    "lawn", "lemon", "light", "lime", "linen", "magenta", "maroon", "medium", "metallic", "midnight", "mint",
    "misty", "moccasin", "navajo", "navy", "olive", "orange", "orchid", "pale", "papaya", "peach", "peru", "pink",
    "plum", "powder", "puff", "purple", "red", "rose", "rosy", "royal", "saddle", "salmon", "sandy", "seashell",
    "sienna", "sky", "slate", "smoke", "snow", "spring", "steel", "tan", "thistle", "tomato", "turquoise",
    "violet", "wheat", "white", "yellow",
)
Q13_WORD1 = ("special", "pending", "unusual", "express")
Q13_WORD2 = ("packages", "requests", "accounts", "deposits")
#: clause 2.4.11.3: FRACTION is 0.0001 / SF
Q11_FRACTION = 0.0001

Params = Mapping[str, str]

# ---------------------------------------------------------------- validation parameters (clause 2.4.x.4)

_VALIDATION: Mapping[int, Params] = {
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
    11: {"NATION": "GERMANY"},  # FRACTION: 0.0001 / SF, added below
    12: {"SHIPMODE1": "MAIL", "SHIPMODE2": "SHIP", "DATE": "1994-01-01"},
    13: {"WORD1": "special", "WORD2": "requests"},
    14: {"DATE": "1995-09-01"},
    15: {"DATE": "1996-01-01"},
    16: {"BRAND": "Brand#45", "TYPE": "MEDIUM POLISHED",
         **{f"SIZE{i}": s for i, s in enumerate(("49", "14", "23", "45", "19", "3", "36", "9"), 1)}},
    17: {"BRAND": "Brand#23", "CONTAINER": "MED BOX"},
    18: {"QUANTITY": "300"},
    19: {"BRAND1": "Brand#12", "BRAND2": "Brand#23", "BRAND3": "Brand#34",
         "QUANTITY1": "1", "QUANTITY2": "10", "QUANTITY3": "20"},
    20: {"COLOR": "forest", "DATE": "1994-01-01", "NATION": "CANADA"},
    21: {"NATION": "SAUDI ARABIA"},
    22: {f"I{i}": c for i, c in enumerate(("13", "31", "23", "29", "30", "18", "17"), 1)},
}


def _fraction(scale_factor: float) -> str:
    return f"{Q11_FRACTION / scale_factor:.10f}"  # qgen prints it the same way (%11.10f)


def validation_params(number: int, scale_factor: float = 1.0) -> dict[str, str]:
    """The query validation parameters of clause 2.4.``number``.4 (Q11's
    FRACTION scaled by 1/SF, as qgen -d does at every scale factor)."""
    _check_number(number)
    params = dict(_VALIDATION[number])
    if number == 11:
        params["FRACTION"] = _fraction(scale_factor)
    return params


# ---------------------------------------------------------------- random parameters (clause 2.4.x.3)

def _first_of_month(months_after_jan_1993: int) -> str:
    return f"{1993 + months_after_jan_1993 // 12}-{months_after_jan_1993 % 12 + 1:02d}-01"


def _new_year(rng: random.Random) -> str:
    return f"{rng.randint(1993, 1997)}-01-01"


def _brand(rng: random.Random) -> str:
    return f"Brand#{rng.randint(1, 5)}{rng.randint(1, 5)}"


def _full_type(rng: random.Random) -> str:
    return " ".join(rng.choice(s) for s in TYPE_SYLLABLES)


def _draw(number: int, rng: random.Random, scale_factor: float) -> dict[str, str]:
    nations = tuple(NATIONS)
    if number == 1:
        return {"DELTA": str(rng.randint(60, 120))}
    if number == 2:
        return {"SIZE": str(rng.randint(1, 50)), "TYPE": rng.choice(TYPE_SYLLABLES[2]), "REGION": rng.choice(REGIONS)}
    if number == 3:
        day = datetime.date(1995, 3, 1) + datetime.timedelta(days=rng.randint(0, 30))
        return {"SEGMENT": rng.choice(SEGMENTS), "DATE": day.isoformat()}
    if number in (4, 15):  # first of a month, January 1993 .. October 1997
        return {"DATE": _first_of_month(rng.randint(0, 57))}
    if number == 5:
        return {"REGION": rng.choice(REGIONS), "DATE": _new_year(rng)}
    if number == 6:
        return {"DATE": _new_year(rng), "DISCOUNT": f"0.0{rng.randint(2, 9)}", "QUANTITY": str(rng.randint(24, 25))}
    if number == 7:
        n1, n2 = rng.sample(nations, 2)
        return {"NATION1": n1, "NATION2": n2}
    if number == 8:
        nation = rng.choice(nations)
        return {"NATION": nation, "REGION": NATIONS[nation], "TYPE": _full_type(rng)}
    if number == 9:
        return {"COLOR": rng.choice(COLORS)}
    if number == 10:  # February 1993 .. January 1995
        return {"DATE": _first_of_month(rng.randint(1, 24))}
    if number == 11:
        return {"NATION": rng.choice(nations), "FRACTION": _fraction(scale_factor)}
    if number == 12:
        m1, m2 = rng.sample(SHIP_MODES, 2)
        return {"SHIPMODE1": m1, "SHIPMODE2": m2, "DATE": _new_year(rng)}
    if number == 13:
        return {"WORD1": rng.choice(Q13_WORD1), "WORD2": rng.choice(Q13_WORD2)}
    if number == 14:  # January 1993 .. December 1997
        return {"DATE": _first_of_month(rng.randint(0, 59))}
    if number == 16:
        sizes = rng.sample(range(1, 51), 8)
        return {"BRAND": _brand(rng), "TYPE": f"{rng.choice(TYPE_SYLLABLES[0])} {rng.choice(TYPE_SYLLABLES[1])}",
                **{f"SIZE{i}": str(s) for i, s in enumerate(sizes, 1)}}
    if number == 17:
        return {"BRAND": _brand(rng), "CONTAINER": " ".join(rng.choice(s) for s in CONTAINER_SYLLABLES)}
    if number == 18:
        return {"QUANTITY": str(rng.randint(312, 315))}
    if number == 19:
        return {"BRAND1": _brand(rng), "BRAND2": _brand(rng), "BRAND3": _brand(rng),
                "QUANTITY1": str(rng.randint(1, 10)), "QUANTITY2": str(rng.randint(10, 20)),
                "QUANTITY3": str(rng.randint(20, 30))}
    if number == 20:
        return {"COLOR": rng.choice(COLORS), "DATE": _new_year(rng), "NATION": rng.choice(nations)}
    if number == 21:
        return {"NATION": rng.choice(nations)}
    # 22: seven different country codes of clause 4.2.2.9 (10..34)
    return {f"I{i}": str(c) for i, c in enumerate(rng.sample(range(10, 35), 7), 1)}


def random_params(number: int, seed: int, scale_factor: float = 1.0) -> dict[str, str]:
    """Parameters of query ``number`` drawn from ``seed`` within the ranges of
    clause 2.4.``number``.3. The same seed gives the same values on every
    machine and Python version (each query has its own string-seeded RNG)."""
    _check_number(number)
    return _draw(number, random.Random(f"wanbench-tpch:{seed}:q{number}"), scale_factor)


def stream_params(scale_factor: float, seed: int | None = None) -> dict[int, dict[str, str]]:
    """Every query's parameters: the validation ones (``seed`` None) or drawn from ``seed``."""
    return {n: validation_params(n, scale_factor) if seed is None else random_params(n, seed, scale_factor)
            for n in range(1, 23)}


def _check_number(number: int) -> None:
    if not 1 <= number <= 22:
        raise ConfigError(f"TPC-H has queries 1..22, not {number!r}")


# ---------------------------------------------------------------- the query texts

_LIMIT = re.compile(r"\n\s*LIMIT\s+(\d+)\s*$", re.IGNORECASE)
_SAFE_VALUE = re.compile(r"[A-Za-z0-9#.\- ]*")


@dataclass(frozen=True)
class Query:
    """One TPC-H query: its text with ``$NAME`` markers and how its answer is compared."""

    number: int
    title: str  # "Pricing Summary Report"
    template: str  # the whole text, LIMIT included, no trailing semicolon
    kinds: tuple[str, ...]  # one clause 2.1.3.5 rule per result column
    order_by: tuple[int, ...]  # 0-based result columns of its ORDER BY (() = no order)
    limit: int | None

    @property
    def label(self) -> str:
        return f"Q{self.number}"

    @property
    def parameters(self) -> tuple[str, ...]:
        return tuple(sorted({m.group("named") or m.group("braced")
                             for m in string.Template.pattern.finditer(self.template)
                             if m.group("named") or m.group("braced")}))

    def sql(self, params: Params) -> str:
        """The query text with ``params`` put in; ``ConfigError`` for a missing
        parameter or a value that is not a plain literal (no quotes)."""
        for name, value in params.items():
            if not _SAFE_VALUE.fullmatch(value):
                raise ConfigError(f"{self.label}: parameter {name}={value!r} is not a plain TPC-H value")
        try:
            return string.Template(self.template).substitute(params)
        except KeyError as exc:
            raise ConfigError(f"{self.label}: no value for parameter {exc.args[0]}") from None

    def sql_unlimited(self, params: Params) -> str:
        """The text without its LIMIT: the reference answer then holds every
        row that ties with the last one kept (LIMIT ties)."""
        return _LIMIT.sub("", self.sql(params))


def _parse(number: int, text: str) -> Query:
    header = {}
    lines = text.strip().splitlines()
    m = re.fullmatch(r"--\s*Q\d+\s+(.*?)\s*(\(.*\))?", lines[0].strip())
    title = m.group(1) if m else lines[0].removeprefix("--").strip()
    for line in lines[1:]:
        if not line.startswith("--"):
            break
        key, _, value = line.removeprefix("--").partition(":")
        header[key.strip()] = value.split()
    body = "\n".join(ln for ln in lines if not ln.startswith("--")).strip().rstrip(";")
    kinds = tuple(header.get("answer", ()))
    if not kinds or any(k not in KINDS for k in kinds):
        raise ValueError(f"q{number:02d}.sql: bad 'answer:' header {kinds!r} (rules: {', '.join(KINDS)})")
    order = tuple(int(c) - 1 for c in header.get("order", ()))
    if any(not 0 <= c < len(kinds) for c in order):
        raise ValueError(f"q{number:02d}.sql: 'order:' names a column outside 1..{len(kinds)}")
    m = _LIMIT.search(body)
    return Query(number, title, body, kinds, order, int(m.group(1)) if m else None)


@functools.cache
def queries() -> dict[int, Query]:
    """The 22 queries by number, read once from ``tpch_sql/``."""
    return {n: _parse(n, (SQL_DIR / f"q{n:02d}.sql").read_text()) for n in range(1, 23)}


def query(number: int) -> Query:
    _check_number(number)
    return queries()[number]
