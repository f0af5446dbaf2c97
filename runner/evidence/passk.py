"""pass@k and pass^k over repeats of a task. Pure, exact integer arithmetic.

``pass_at_k`` / ``pass_hat_k``
    The unbiased pass@k estimator of Chen et al. (2021), the probability that
    at least one of ``k`` samples drawn without replacement from ``n``
    attempts with ``c`` passes passes, and pass^k, the probability that all
    ``k`` pass (a reliability measure).
"""

from __future__ import annotations

import math


def _check_nck(n: int, c: int, k: int) -> None:
    if n < 0 or c < 0 or c > n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if k < 1 or k > n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator ``1 - C(n - c, k) / C(n, k)`` (Chen et al., 2021).

    ``n`` attempts of which ``c`` passed; the probability that at least one of ``k``
    attempts drawn without replacement passed.  Uses the product form
    ``1 - prod_{i=n-c+1}^{n} (1 - k / i)`` evaluated as ``-expm1(sum log1p(-k / i))`` so it
    keeps relative accuracy at both ends.  Requires ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    _check_nck(n, c, k)
    if n - c < k:
        return 1.0
    return -math.expm1(math.fsum(math.log1p(-k / i) for i in range(n - c + 1, n + 1)))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k: the probability that ``k`` attempts drawn without replacement all passed.

    ``C(c, k) / C(n, k)`` (0 when ``c < k``), computed as an exact integer ratio with one
    correctly rounded division.  Requires ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    _check_nck(n, c, k)
    if c < k:
        return 0.0
    return math.comb(c, k) / math.comb(n, k)
