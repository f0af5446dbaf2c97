"""Bounded JSON: hostile values are refused or made storable, and what is stored reads back."""

from __future__ import annotations

import enum
import json
import math
from typing import Any

import pydantic_core
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from runner.bounded_json import (
    BoundsError,
    JsonBounds,
    check_storable,
    loads_bounded,
    sanitize,
)
from runner.records import Outcome, TaskKind, Trial

# database=None: no .hypothesis/ directory is written into the repository.
PROPERTY = settings(max_examples=200, deadline=None, derandomize=True, database=None)

MiB = 1 << 20
DEFAULT = JsonBounds()
SMALL = JsonBounds(max_bytes=300, max_depth=3, max_number_chars=24, max_items=12)


class R(BaseModel):
    """A record with one free value, written and read like a ledger line."""

    model_config = ConfigDict(extra="forbid")
    value: Any


class Colour(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


# ----------------------------------------------------------------------------- helpers


def same(a: Any, b: Any) -> bool:
    """Equal, with matching types, key order and float sign, NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def joined(value: Any) -> Any:
    """``value`` as its ``json.dumps`` escapes read back: surrogate pairs become one character."""

    def text(s: str) -> str:
        return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")

    if isinstance(value, str):
        return text(value)
    if isinstance(value, list):
        return [joined(item) for item in value]
    if isinstance(value, dict):
        return {text(key): joined(item) for key, item in value.items()}
    return value


def depth_and_items(value: Any) -> tuple[int, int]:
    """Container nesting depth and count of values (keys not counted), without recursion."""
    deepest, items = 0, 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        items += 1
        if isinstance(item, list | dict):
            deepest = max(deepest, depth + 1)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest, items


def nest(value: Any, depth: int, in_dict: bool = False) -> Any:
    """``value`` inside ``depth`` containers: lists, or single-key dicts."""
    for _ in range(depth):
        value = {"k": value} if in_dict else [value]
    return value


def short_id(value: Any) -> str:
    """A test id that neither runs to a mebibyte nor trips Python's int digit limit."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"int_of_{value.bit_length()}_bits"
    text = repr(value) if isinstance(value, bytes | str) else type(value).__name__
    return text if len(text) <= 40 else f"{text[:30]}..._{len(text)}_chars"


def refused(data: bytes, bounds: JsonBounds = DEFAULT) -> str:
    with pytest.raises(BoundsError) as caught:
        loads_bounded(data, bounds)
    return str(caught.value)


def not_storable(value: Any, bounds: JsonBounds = DEFAULT) -> str:
    with pytest.raises(BoundsError) as caught:
        check_storable(value, bounds)
    return str(caught.value)


# ----------------------------------------------------------------------------- strategies

# Any code point, surrogates made frequent, plus the characters JSON must escape.
# (st.text drops surrogates even from an alphabet that has them: join lists instead.)
any_char = (
    st.characters(exclude_categories=())
    | st.characters(categories=["Cs"])
    | st.sampled_from('"\\\x00\n\x7f\u2028\ufeff\U0001f600[]{},:0')
)
hostile_text = st.lists(any_char, max_size=10).map("".join)
# 64 characters is the default cap: 10**63 has 64 digits, -(10**63) 65 characters.
edge_ints = st.sampled_from([10**63 - 1, 10**63, 10**64, -(10**63 - 1), -(10**63), 2**63, -(2**63)])
hostile_ints = st.integers(-(10**200), 10**200) | edge_ints
special_floats = st.sampled_from(
    [math.nan, math.inf, -math.inf, -0.0, 5e-324, 1.7976931348623157e308]
)
hostile_floats = st.floats() | special_floats
json_scalars = st.none() | st.booleans() | hostile_ints | hostile_floats | hostile_text
depths = st.integers(0, 3) | st.integers(29, 34) | st.integers(0, 120)


def json_containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (
        st.lists(children, max_size=4)
        | st.dictionaries(hostile_text, children, max_size=4)
        | st.builds(nest, children, depths, st.booleans())
    )


# Only JSON types (str keys, no tuples), with hostile content.
json_values = st.recursive(json_scalars, json_containers, max_leaves=20)

odd_keys = hostile_text | hostile_ints | st.none() | st.booleans() | st.floats()
odd_scalars = st.sampled_from(
    [b"bytes\x00", {1, 2}, frozenset({"a"}), object, Colour.RED, Level.HIGH, 1 + 2j, ...]
)


def any_containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return (
        json_containers(children)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(odd_keys, children, max_size=3)
    )


# Any Python value a transcript could hold; half of them of JSON types only.
hostile_values = json_values | st.recursive(
    json_scalars | odd_scalars, any_containers, max_leaves=20
)

json_tokens = st.sampled_from(
    [
        *'[]{}",:\\ -.e0',
        "1",
        "9" * 70,
        "1e999",
        "NaN",
        "-Infinity",
        "true",
        "null",
        '"a"',
        "\\ud800",
        "\\udc00",
        "\\ud83d\\ude00",
        "\\u0000",
        "\\\\",
        "\ufeff",
        "é",
        "\x00",
        "[" * 40,
        "]" * 40,
    ]
)
json_like = st.lists(json_tokens, max_size=60).map("".join)
untrusted_bytes = (
    st.binary()
    | json_like.map(str.encode)
    | hostile_text.map(lambda s: s.encode("utf-8", "surrogatepass"))
    | json_values.map(lambda v: json.dumps(v).encode())
)

# ----------------------------------------------------------------------------- loads_bounded


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"[" * 10_000 + b"]" * 10_000, "nested deeper than 32 levels"),
        (b'{"a":' * 10_000 + b"1" + b"}" * 10_000, "nested deeper than 32 levels"),
        (b"[" * 10_000, "nested deeper than 32 levels"),
        (b"1" * 5000, "a number with 5000 characters (the cap is 64)"),
        (b"[0.5, -" + b"1" * 100 + b"e5]", "a number with 103 characters (the cap is 64)"),
        (b'{"a": NaN}', "NaN is not JSON"),
        (b"Infinity", "Infinity is not JSON"),
        (b"[-Infinity]", "-Infinity is not JSON"),
        (b"1e999", "the number 1e999 is too large for a float"),
        (b"[-1e400]", "the number -1e400 is too large for a float"),
        (b'"\\ud800"', "a lone surrogate in a string"),
        (b'{"\\udc00": 1}', "a lone surrogate in a string"),
        (b'["ok", "\\ud83d\\u0041"]', "a lone surrogate in a string"),
        (b'"\\ude00\\ud83d"', "a lone surrogate in a string"),
        (b"\xff", "not valid UTF-8 (byte 0)"),
        (b'"\xed\xa0\x80"', "not valid UTF-8 (byte 1)"),  # an encoded surrogate
        (b"\xef\xbb\xbf[]", "a byte order mark before the JSON"),
        (b"  ", "not JSON: Expecting value at column 3"),
        (b"[1, ]", "not JSON: Expecting value at column 5"),
        (b"[1]\n[2]", "not JSON: Extra data at line 2 column 1"),
        (b'"tab\there"', "not JSON: Invalid control character at column 5"),
        (b"x" * (MiB + 1), "over 1048576 bytes"),
        (b"[" + b"0," * 100_000 + b"0]", "more than 100000 values"),
    ],
    ids=short_id,
)
def test_each_reason_is_a_bounds_error(data: bytes, reason: str) -> None:
    assert refused(data) == reason


def test_a_non_bytes_argument_is_a_bounds_error() -> None:
    assert refused("[]") == "expected bytes, not str"  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "value"),
    [
        (b'"\\u0000"', "\x00"),
        (b'{"\\u0000": "a\\u0000b"}', {"\x00": "a\x00b"}),
        (b'"\\ud83d\\ude00"', "\U0001f600"),
        (b'"\\\\ud800"', "\\ud800"),  # an escaped backslash, then the letters "ud800"
        (b'{"a": 1, "a": 2}', {"a": 2}),
        (b" \t\n\r[true, false, null, -0, 1e-999] ", [True, False, None, 0, 0.0]),
        (bytearray(b"[1]"), [1]),
        (memoryview(b"[1]"), [1]),
    ],
    ids=short_id,
)
def test_accepted_documents(data: bytes, value: Any) -> None:
    assert same(loads_bounded(data), value)


def test_brackets_commas_and_digits_inside_strings_do_not_count() -> None:
    inside = "[" * 100 + "1" * 5000 + '\\"' + "," * 200_000 + "{" * 100 + "\\\\"
    assert loads_bounded(json.dumps([inside, {inside: inside}]).encode()) == [
        inside,
        {inside: inside},
    ]
    assert loads_bounded(json.dumps(inside).encode(), JsonBounds(max_items=1)) == inside


@pytest.mark.parametrize("in_dict", [False, True])
def test_depth_at_the_bound_passes_and_one_over_fails(in_dict: bool) -> None:
    assert loads_bounded(json.dumps(nest(1, 32, in_dict)).encode()) == nest(1, 32, in_dict)
    assert loads_bounded(json.dumps(nest([], 31, in_dict)).encode()) == nest([], 31, in_dict)
    assert refused(json.dumps(nest(1, 33, in_dict)).encode()) == "nested deeper than 32 levels"
    assert refused(json.dumps(nest({}, 32, in_dict)).encode()) == "nested deeper than 32 levels"
    mixed = [{"a": [{"b": nest(None, 28)}]}]
    assert loads_bounded(json.dumps(mixed).encode()) == mixed
    assert refused(json.dumps([mixed]).encode()) == "nested deeper than 32 levels"


def test_numbers_at_the_bound_pass_and_one_over_fails() -> None:
    for number in (10**63, -(10**63 - 1), 10**63 - 1):
        assert loads_bounded(str(number).encode()) == number
    assert refused(str(10**64).encode()) == "a number with 65 characters (the cap is 64)"
    assert refused(str(-(10**63)).encode()) == "a number with 65 characters (the cap is 64)"
    token = "0." + "1" * 62
    assert loads_bounded(token.encode()) == float(token)
    assert refused((token + "1").encode()) == "a number with 65 characters (the cap is 64)"
    longest = 640 * "9"
    bounds = JsonBounds(max_number_chars=640)
    assert loads_bounded(longest.encode(), bounds) == int(longest)
    assert refused((longest + "9").encode(), bounds).startswith("a number with 641 characters")


def test_size_and_items_at_the_bound_pass_and_one_over_fails() -> None:
    exact = b'"' + b"a" * (MiB - 2) + b'"'
    assert loads_bounded(exact) == "a" * (MiB - 2)
    assert refused(exact + b" ") == "over 1048576 bytes"
    bounds = JsonBounds(max_items=4)
    assert loads_bounded(b'{"a": [], "b": {}, "c": 1}', bounds) == {"a": [], "b": {}, "c": 1}
    assert loads_bounded(b"[1, 2, 3]", bounds) == [1, 2, 3]
    assert refused(b"[1, 2, 3, 4]", bounds) == "more than 4 values"
    assert refused(b"[[[[ ]]]]", JsonBounds(max_items=3)) == "more than 3 values"


@pytest.mark.parametrize(
    ("unit", "reason"),
    [
        (b'{"key": "value", "n": -123456, "f": 1.5e10, "t": true, "s": "\\ud83d\\ude00"},', None),
        (b'"' + b"x\xc3\xa9[{,1" * 1000 + b'",', None),
        (b'"' + b'\\n\\"\\\\\\u00e9' * 1000 + b'",', None),
        (b"-1234567890.0987654321e-12," * 10 + b"1" * 64 + b",", None),
        (b"[" * 30 + b'"' + b"x" * 300 + b'"' + b"]" * 30 + b",", None),
        (b"[[[[[[[[[[1]]]]]]]]]],", "more than 100000 values"),
        (b"[],", "more than 100000 values"),
        (b"0,", "more than 100000 values"),
        (b"[" * 1000, "nested deeper than 32 levels"),
        (b"[" * 32 + b'"' + b"x" * 300 + b'"' + b"]" * 32 + b",", "nested deeper than 32 levels"),
    ],
    ids=[
        "objects",
        "strings",
        "escapes",
        "numbers",
        "depth-31",
        "many-lists",
        "empty-lists",
        "zeros",
        "deep",
        "depth-33",
    ],
)
@pytest.mark.timeout(30)  # a hang guard: a superlinear parse of a MiB takes far longer
def test_a_mebibyte_is_parsed_or_refused_in_bounded_time(unit: bytes, reason: str | None) -> None:
    """No pathological input: a mebibyte of each shape is parsed or refused at once (the
    timeout ends a quadratic parse; no wall-clock figure is asserted, bench/ measures it)."""
    data = b"[" + unit * ((MiB - 2) // len(unit))
    data = data.rstrip(b",") + b"]"
    assert MiB - len(unit) - 2 <= len(data) <= MiB
    if reason is None:
        loads_bounded(data)
    else:
        assert refused(data) == reason


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'"' + b'\\"' * (MiB // 2 - 1), "not JSON: Unterminated string starting at column 1"),
        (
            b'["a", "' + b'\\"' * (MiB // 2 - 8) + b"\\",
            "not JSON: Unterminated string starting at column 7",
        ),
        (b'"' + b"\\" * (MiB - 1), "not JSON: Unterminated string starting at column 1"),
        (b'"' * MiB, "not JSON: Extra data at column 3"),
        (b'["' * (MiB // 2), "nested deeper than 32 levels"),
        (b"0" * MiB, "a number with 1048576 characters (the cap is 64)"),
        (b"[" + b"1" * 64 + b"," * (MiB - 66) + b"]", "more than 100000 values"),
    ],
    ids=[
        "escaped-quotes",
        "escaped-quotes-in-list",
        "backslashes",
        "quotes",
        "open-quote",
        "digits",
        "commas",
    ],
)
@pytest.mark.timeout(30)  # a hang guard: the quadratic scan this catches took minutes
def test_pathological_mebibytes_are_refused_in_linear_time(data: bytes, reason: str) -> None:
    # An unterminated string once made the scan restart at every later quote: quadratic.
    assert refused(data) == reason


def test_json_bounds_refuses_limits_the_reader_cannot_honour() -> None:
    for bad in (
        {"max_depth": 0},
        {"max_depth": 129},
        {"max_number_chars": 23},
        {"max_number_chars": 641},
        {"max_items": 0},
        {"max_bytes": 0},
    ):
        with pytest.raises(ValueError):
            JsonBounds(**bad)


# ----------------------------------------------------------------------------- check_storable


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (10**5000, "an integer of about 5001 digits (the cap is 64 characters)"),
        (10**64, "a number with 65 characters (the cap is 64)"),
        (float("nan"), "NaN is not JSON"),
        ([float("inf")], "Infinity is not JSON"),
        ({"a": float("-inf")}, "-Infinity is not JSON"),
        ("\ud800", "a lone surrogate in a string"),
        ("\ud83d\ude00", "a lone surrogate in a string"),  # two code points: not UTF-8
        ({"\udc00": 1}, "a lone surrogate in a key"),
        ({1: 2}, "a key of type int; JSON keys are strings"),
        ((1, 2), "a value of type tuple, which is not JSON"),
        ({1, 2}, "a value of type set, which is not JSON"),
        (b"x", "a value of type bytes, which is not JSON"),
        (Colour.RED, "a value of type Colour, which is not JSON"),
        (nest(1, 10_000), "nested deeper than 32 levels"),
        (nest(1, 33, in_dict=True), "nested deeper than 32 levels"),
    ],
    ids=short_id,
)
def test_not_storable(value: Any, reason: str) -> None:
    assert not_storable(value) == reason


def test_storable_at_the_bounds() -> None:
    for value in (nest(1, 32), nest({}, 31, True), 10**63, -(10**63 - 1), "\x00", 5e-324, -0.0):
        check_storable(value)


def test_a_value_inside_itself_is_not_storable() -> None:
    loop: list[Any] = []
    loop.append(loop)
    loop.append(loop)
    assert not_storable(loop) == "nested deeper than 32 levels"


# ----------------------------------------------------------------------------- sanitize


def test_sanitize_replaces_what_cannot_be_stored() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    value = {
        "a\ud800": ["\ud83d\ude00", float("nan"), float("inf"), 10**70, 10**5000],
        1: (1, 2),
        None: {3},
        False: b"\x00",
        2.5: Colour.RED,
        Level.HIGH: Level.HIGH,
        "deep": nest("x", 40),
        "loop": loop,
    }
    assert sanitize(value) == {
        "a\ufffd": ["\U0001f600", None, None, str(10**70), "<an integer of about 5001 digits>"],
        "1": [1, 2],
        "null": "{3}",
        "false": "b'\\x00'",
        "2.5": "red",
        "3": 3,
        "deep": nest("<deeper than 32 levels>", 31),
        "loop": [1, "<a cycle>"],
    }
    assert type(sanitize(Colour.RED)) is str
    assert type(sanitize(Level.HIGH)) is int


def test_sanitize_cuts_long_reprs_and_survives_hostile_ones() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    class Long:
        def __repr__(self) -> str:
            return "\ud800" * 500

    assert sanitize(Hostile()) == "<Hostile: repr failed with RuntimeError>"
    assert sanitize(Long()) == "\ufffd" * 200


@pytest.mark.timeout(30)  # a hang guard, not a speed figure
def test_sanitize_does_not_recurse_with_the_depth_of_its_input() -> None:
    assert sanitize(nest(1, 100_000), JsonBounds(max_depth=2)) == [["<deeper than 2 levels>"]]


# ----------------------------------------------------------------------------- the ledger


def test_a_trial_with_sanitized_hostile_values_round_trips_through_the_ledger_format() -> None:
    hostile = {"\ud800": [float("nan"), 10**5000, nest("x", 40), (1,)], 7: "\ud83d"}
    value = sanitize(hostile)
    trial = Trial(
        run_id="r",
        job_id="j",
        protocol_sha256="p",
        task_id="t",
        arm="c",
        repeat=0,
        task_kind=TaskKind.ORDINARY,
        outcome=Outcome.MISS,
        passed=False,
        timeout=False,
        tool_violation=False,
        abstained=False,
        wall_s=1.0,
        worker="w",
        started_at="s",
        finished_at="f",
        answer=value,
        transcript=sanitize([{"role": "assistant", "content": hostile}]),
    )
    back = Trial.model_validate_json(trial.model_dump_json())
    assert same(back.answer, value)
    assert back.transcript is not None and back.transcript == trial.transcript
    # Unsanitized, the same values never make a record: the writer would accept what the
    # reader refuses.
    with pytest.raises(ValueError):
        Trial.model_validate({**trial.model_dump(), "transcript": [{"content": hostile}]})


# ----------------------------------------------------------------------------- properties


@PROPERTY
@given(json_values)
def test_loads_bounded_reads_back_what_json_dumps_wrote_or_refuses(value: Any) -> None:
    # \u escapes cannot tell a surrogate pair from the character it encodes.
    expected = joined(value)
    try:
        got = loads_bounded(json.dumps(value).encode())
    except BoundsError:
        with pytest.raises(BoundsError):
            check_storable(expected)
        return
    assert same(got, expected)
    check_storable(got)  # the same rules on both sides
    # Written raw, any surrogate is invalid UTF-8: read back exactly, or refused.
    raw = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    try:
        got = loads_bounded(raw)
    except BoundsError:
        with pytest.raises(BoundsError):
            check_storable(value)
        return
    assert same(got, value)


@PROPERTY
@given(hostile_values)
def test_what_check_storable_accepts_the_ledger_writes_and_reads_back(value: Any) -> None:
    try:
        check_storable(value)
    except BoundsError:
        return
    line = R(value=value).model_dump_json()
    assert same(R.model_validate_json(line).value, value)
    assert same(loads_bounded(pydantic_core.to_json(value)), value)


@PROPERTY
@given(hostile_values, st.sampled_from([JsonBounds(), SMALL]))
def test_sanitize_makes_any_value_storable_and_is_idempotent(
    value: Any, bounds: JsonBounds
) -> None:
    clean = sanitize(value, bounds)
    check_storable(clean, bounds)
    assert same(sanitize(clean, bounds), clean)
    line = R(value=clean).model_dump_json()
    assert same(R.model_validate_json(line).value, clean)


@PROPERTY
@given(untrusted_bytes, st.sampled_from([JsonBounds(), SMALL]))
def test_loads_bounded_raises_only_bounds_errors_and_returns_bounded_values(
    data: bytes, bounds: JsonBounds
) -> None:
    try:
        value = loads_bounded(data, bounds)
    except BoundsError:
        return
    check_storable(value, bounds)
    depth, items = depth_and_items(value)
    assert depth <= bounds.max_depth
    assert items <= bounds.max_items
    assert same(value, json.loads(data))


@PROPERTY
@given(st.text(alphabet=any_char, max_size=80))
def test_loads_bounded_on_arbitrary_text(text: str) -> None:
    for data in (text.encode("utf-8", "surrogatepass"), text.encode("utf-8", "replace")):
        try:
            loads_bounded(data, SMALL)
        except BoundsError:
            pass
