from decimal import Decimal

import pytest

from ledgerkit import round_cents, split_amount


@pytest.mark.parametrize(
    "total,parts,expected",
    [
        ("100.00", 3, ["33.34", "33.33", "33.33"]),
        ("0.05", 2, ["0.03", "0.02"]),
        ("10", 4, ["2.50", "2.50", "2.50", "2.50"]),
        ("0.01", 3, ["0.01", "0.00", "0.00"]),
        ("100.00", 6, ["16.67", "16.67", "16.67", "16.67", "16.66", "16.66"]),
        ("-100.00", 3, ["-33.34", "-33.33", "-33.33"]),
        ("10.005", 2, ["5.01", "5.00"]),
    ],
)
def test_shares_add_up_larger_first(total, parts, expected):
    shares = split_amount(Decimal(total), parts)
    assert shares == [Decimal(e) for e in expected]
    assert sum(shares) == round_cents(total)
    assert all(share.as_tuple().exponent == -2 for share in shares)


@pytest.mark.parametrize("parts", range(1, 13))
def test_shares_differ_by_at_most_a_cent(parts):
    shares = split_amount(Decimal("1234.57"), parts)
    assert sum(shares) == Decimal("1234.57")
    assert max(shares) - min(shares) <= Decimal("0.01")
    assert shares == sorted(shares, reverse=True)
