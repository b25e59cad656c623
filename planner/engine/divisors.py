"""Divisor arithmetic in closed form, so work stays bounded at the top of every allowed range
(GPU counts to 10^7, batches to 10^9 sequences): nothing here walks a range of integers.

`divisors(n)` factorises n by trial division (stopping at the square root of what is left),
then multiplies the prime powers out: a number up to 10^9 has at most 1,344 divisors, while
scanning 1..√n is 31,623 steps for every call. `nearest_multiples` and `top_by_gcd` pick the
integers of an interval that share the most factors with a given count without listing the
interval: every integer whose gcd with N is g is a multiple of g, and g divides N (a batch of
10^9 sequences ±25 % was a 5·10^8-element sort, ±10 % at 10^13 tokens a 14 TiB array).
"""

from __future__ import annotations

from functools import lru_cache
from math import gcd
from typing import Callable


def divisors(n: int) -> list[int]:
    """Every divisor of n ≥ 1, ascending. 12 → [1, 2, 3, 4, 6, 12]; 10^7 = 2^7·5^7 has 64."""
    return list(_divisors(int(n)))


@lru_cache(maxsize=4096)  # the search asks for the same few numbers thousands of times
def _divisors(n: int) -> tuple[int, ...]:
    out, d = [1], 2
    while d * d <= n:
        if n % d == 0:
            k = 0
            while n % d == 0:
                n //= d
                k += 1
            out = [x * d ** e for x in out for e in range(k + 1)]
        d += 1 if d == 2 else 2
    if n > 1:
        out += [x * n for x in out]
    return tuple(sorted(out))


def closeness(m: int, center: float) -> tuple[float, int]:
    """Rank of m by nearness to `center`: 2·|m − c| + (m > c), then m — the nearest, a value
    above the centre losing half a unit (on an integer centre: the nearest, ties the smaller)."""
    return 2 * abs(m - center) + (m > center), m


def nearest_multiples(step: int, center: float, lo: int, hi: int, k: int) -> list[int]:
    """The `k` multiples of `step` in [lo, hi] first by `closeness` to `center`, in that
    order (closeness falls off on both sides of the centre, so they are among the k + 1
    below it and the k + 1 above it). step 4, center 10, [1, 20], k 3 → [8, 12, 4]."""
    if step <= 0 or hi < lo:
        return []
    base = int(min(max(center, lo), hi) // step) * step  # the centre clamped into [lo, hi]
    near = [base - j * step for j in range(k + 1)] + [base + (j + 1) * step for j in range(k + 1)]
    near = sorted({m for m in near if lo <= m <= hi}, key=lambda m: closeness(m, center))
    return near[:k]


def top_by_gcd(n: int, lo: int, hi: int, k: int, center: float,
               step: Callable[[int], int] = lambda d: d) -> list[int]:
    """The first `k` integers m of [lo, hi] ranked by −gcd(m, n), then `closeness`, among those
    that are multiples of step(gcd(m, n)) (step(d) = lcm(d, 8): whole nodes of 8). Exact without
    listing the interval: a multiple of step(g) nearer the centre than m has gcd ≥ g, so it ranks
    above m; the k best therefore lie among the k nearest multiples of step(d), d | n.
    n 240, [900, 1100], k 2, centre 1024 → [960, 1080] (gcd 240, then 120)."""
    pool: set[int] = set()
    for d in divisors(n):
        pool.update(nearest_multiples(step(d), center, lo, hi, k))
    return sorted(pool, key=lambda m: (-gcd(m, n), *closeness(m, center)))[:k]
