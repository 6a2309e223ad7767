"""Small exact statistics in pure Python (no scipy): intervals, Fisher, BH, kappa.

Each function cites its formula; tests compare them with hand-computed values.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

Z95 = 1.959963984540054  # two-sided 95 % normal quantile


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval for a binomial proportion k/n (None when n == 0)."""
    if n == 0:
        return None
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe(k1: int, n1: int, k2: int, n2: int, z: float = Z95) -> tuple[float, float] | None:
    """Newcombe's hybrid score interval (method 10) for p1 - p2 = k1/n1 - k2/n2."""
    w1, w2 = wilson(k1, n1, z), wilson(k2, n2, z)
    if w1 is None or w2 is None:
        return None
    p1, p2 = k1 / n1, k2 / n2
    (l1, u1), (l2, u2) = w1, w2
    d = p1 - p2
    lower = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    upper = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return max(-1.0, lower), min(1.0, upper)


def newcombe_paired(
    both: int, only_first: int, only_second: int, neither: int, z: float = Z95
) -> tuple[float, float] | None:
    """Newcombe's score interval (1998b, method 10) for p1 - p2 when both proportions are
    measured on the same items (before/after on the same tasks): p1 = (both + only_first) / n,
    p2 = (both + only_second) / n. Narrower than :func:`newcombe` when the two agree on most
    items, because it uses their correlation (phi)."""
    n = both + only_first + only_second + neither
    if n == 0:
        return None
    k1, k2 = both + only_first, both + only_second
    (l1, u1), (l2, u2) = wilson(k1, n, z), wilson(k2, n, z)  # type: ignore[misc]
    p1, p2 = k1 / n, k2 / n
    margins = k1 * (n - k1) * k2 * (n - k2)
    phi = (both * neither - only_first * only_second) / math.sqrt(margins) if margins else 0.0
    below = (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2
    above = (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2
    d = p1 - p2
    return max(-1.0, d - math.sqrt(max(0.0, below))), min(1.0, d + math.sqrt(max(0.0, above)))


def mcnemar_exact(only_first: int, only_second: int) -> float:
    """Two-sided exact McNemar p-value for paired outcomes: of the items where the two differ,
    is the split ``only_first`` / ``only_second`` further from even than chance (a binomial
    test against 1/2)? Items where the two agree carry no information here."""
    n = only_first + only_second
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(only_first, only_second) + 1)) / 2**n
    return min(1.0, 2 * tail)


def mcnemar_power(n: int, discordant: float, difference: float, alpha: float = 0.05) -> float:
    """Probability that :func:`mcnemar_exact` finds ``p < alpha`` in the direction of the
    effect, for ``n`` paired items of which a share ``discordant`` differ and the second
    policy wins ``difference`` more of them than the first (a share of all ``n``): the number
    of discordant items is Binomial(n, discordant), the second's wins among them
    Binomial(D, (discordant + difference) / (2 * discordant)). Exact (a sum over both), for
    choosing how many paired test tasks a comparison needs before running it."""
    if not 0 < discordant <= 1 or not 0 <= difference <= discordant:
        raise ValueError(
            f"need 0 < discordant <= 1 and 0 <= difference <= discordant, got "
            f"discordant={discordant}, difference={difference}"
        )
    win = (discordant + difference) / (2 * discordant)
    power = 0.0
    for d in range(n + 1):
        p_d = math.comb(n, d) * discordant**d * (1 - discordant) ** (n - d)
        if p_d < 1e-12:
            continue
        for wins in range(d // 2 + 1, d + 1):
            if mcnemar_exact(d - wins, wins) < alpha:
                power += p_d * math.comb(d, wins) * win**wins * (1 - win) ** (d - wins)
    return power


def fisher_greater(a: int, b: int, c: int, d: int) -> float:
    """One-sided Fisher exact p-value for the table [[a, b], [c, d]], H1: odds ratio > 1.

    Rows are failure / success, columns LACKING / PRESENT: a small p means LACKING is
    over-represented among failures. It sums the hypergeometric tail P(X >= a) with the
    margins fixed.
    """
    row1, col1, n = a + b, a + c, a + b + c + d
    if n == 0:
        return 1.0
    total = math.comb(n, col1)
    hi = min(row1, col1)
    tail = sum(math.comb(row1, x) * math.comb(n - row1, col1 - x) for x in range(a, hi + 1))
    return min(1.0, tail / total)


def benjamini_hochberg(pvalues: Sequence[float | None]) -> list[float | None]:
    """Benjamini-Hochberg q-values (step-up, monotone); None entries are skipped."""
    idx = [i for i, p in enumerate(pvalues) if p is not None]
    m = len(idx)
    q: list[float | None] = [None] * len(pvalues)
    running = 1.0
    ordered = sorted(idx, key=lambda i: pvalues[i])  # ascending p
    for pos in range(m - 1, -1, -1):
        i = ordered[pos]
        running = min(running, pvalues[i] * m / (pos + 1))
        q[i] = running
    return q


def cohen_kappa(x: Sequence[str], y: Sequence[str]) -> float | None:
    """Cohen's kappa for two raters over the same items (None when chance agreement is 1)."""
    n = len(x)
    if n == 0 or n != len(y):
        return None
    observed = sum(a == b for a, b in zip(x, y, strict=True)) / n
    cx, cy = Counter(x), Counter(y)
    expected = sum(cx[k] * cy[k] for k in cx) / (n * n)
    if math.isclose(expected, 1.0):
        return None
    return (observed - expected) / (1 - expected)


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and population standard deviation (ddof=0, as the paper's np.std)."""
    if not values:
        return None, None
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / n
    return mean, math.sqrt(var)
