"""Properties of the one bounded parser (planner.io.parse): any text either parses or is one
InputError — never RecursionError, OverflowError, ValueError — and a document within the
bounds round-trips, while one outside them is refused naming the key."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.errors import InputError
from planner.io.parse import parse_text
from planner.io.bounds import MAX_DEPTH, MAX_INT, MAX_INT_DIGITS, bounded_int

KEYS = st.text(alphabet="abcdefgh_", min_size=1, max_size=6)
SCALARS = st.one_of(st.none(), st.booleans(), st.text(max_size=8),
                    st.integers(-2 * MAX_INT, 2 * MAX_INT), st.integers(-10**30, 10**30),
                    st.floats(allow_nan=True, allow_infinity=True))
DOCS = st.dictionaries(KEYS, st.recursive(
    SCALARS, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(KEYS, kids, max_size=3),
    max_leaves=12), max_size=4)


def _out_of_bounds(x) -> bool:
    if isinstance(x, dict):
        return any(_out_of_bounds(v) for v in x.values())
    if isinstance(x, list):
        return any(_out_of_bounds(v) for v in x)
    if isinstance(x, float):
        return not math.isfinite(x)
    return isinstance(x, int) and not isinstance(x, bool) and abs(x) > MAX_INT


@settings(max_examples=300, deadline=None)
@given(doc=DOCS, fmt=st.sampled_from(["json", "yaml"]))
def test_within_bounds_round_trips_outside_is_one_input_error(doc, fmt):
    text = json.dumps(doc) if fmt == "json" else yaml.safe_dump(doc)
    if _out_of_bounds(doc):
        with pytest.raises(InputError) as e:
            parse_text(text, fmt, "f")
        assert "\n" not in str(e.value)
        assert "out of range" in str(e.value) or "finite" in str(e.value) \
            or "not allowed" in str(e.value)  # JSON's NaN / Infinity constants
    else:
        assert parse_text(text, fmt, "f") == doc


@settings(max_examples=400, deadline=None)
@given(text=st.text(alphabet='{}[]"\'#:=,.-+_ \n\t0123456789eExyz', max_size=200),
       fmt=st.sampled_from(["json", "yaml", "toml"]))
def test_any_text_parses_or_is_one_input_error(text, fmt):
    try:
        parse_text(text, fmt, "f")
    except InputError as e:
        assert "\n" not in str(e)


@pytest.mark.parametrize("fmt,text", [
    ("json", '{"a":' * 5000 + "1" + "}" * 5000),
    ("json", "[" * 100_000),
    ("toml", "a = " + "[" * 5000 + "]" * 5000),
    ("yaml", "a: " + "[" * 5000 + "]" * 5000),
])
def test_deep_nesting_refused_before_the_recursive_parser(fmt, text):
    with pytest.raises(InputError, match=f"nested deeper than {MAX_DEPTH}"):
        parse_text(text, fmt, "f")


@pytest.mark.parametrize("fmt,text,key,line", [
    ("json", '{\n "n_layer":\n ' + "9" * 5000 + "}", "n_layer", 3),
    ("yaml", "a: 1\nlayout:\n  tp: " + "9" * 5000 + "\n", "layout.tp", 3),
    ("toml", "[parallelism]\ntensor_parallel_degree = " + "9" * 5000 + "\n",
     "tensor_parallel_degree", 2),
    ("yaml", "gpus: 9223372036854775808\n", "gpus", 1),
    ("toml", "gpus = 9223372036854775807\n", "gpus", 1),
    ("json", '{"x": [1, 2, 1e400]}', "x[2]", 1),
    ("yaml", "x: .inf\n", "x", 1),
])
def test_a_refused_number_names_key_and_line(fmt, text, key, line):
    with pytest.raises(InputError) as e:
        parse_text(text, fmt, "f")
    assert e.value.field == f"f:{line}" and e.value.message.startswith(f"{key}: "), e.value


def test_bounded_int_at_the_edges():
    assert bounded_int(str(MAX_INT), "k") == MAX_INT and bounded_int(str(-MAX_INT), "k") == -MAX_INT
    for literal in (str(MAX_INT + 1), "9" * (MAX_INT_DIGITS + 1), "9" * 5000):
        with pytest.raises(InputError, match="^k: integer .* out of range"):
            bounded_int(literal, "k")
    with pytest.raises(InputError, match="^k: must be an integer, got 'x1'"):
        bounded_int("x1", "k")


# Digit runs near the refusal length, brackets near the depth bound, and characters str.isdigit
# reads as digits outside ASCII: where the quick look and the character scan could part ways.
_RUNS = st.lists(st.one_of(st.text(alphabet="0123456789_", min_size=MAX_INT_DIGITS - 2,
                                   max_size=MAX_INT_DIGITS + 3),
                           st.text(alphabet='[{]}"\'#\n =x.²٣', max_size=6),
                           st.just("[" * (MAX_DEPTH - 3))), max_size=8).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=_RUNS, toml=st.booleans())
def test_the_quick_look_skips_only_texts_the_scan_passes(text, toml):
    from planner.io.parse import _nothing_to_refuse, _scan
    from planner.io.bounds import Refused
    if _nothing_to_refuse(text):
        try:
            _scan(text, toml)
        except Refused as e:  # pragma: no cover - the property failing
            pytest.fail(f"skipped a text the scan refuses: {e}")


def test_the_quick_look_sends_each_refusable_text_to_the_scan():
    from planner.io.parse import _nothing_to_refuse
    assert _nothing_to_refuse("a = 1\n[b]\nc = [1, 2]\n")
    assert not _nothing_to_refuse("a = " + "1" * (MAX_INT_DIGITS + 1))
    assert not _nothing_to_refuse("a = 1_" + "2" * MAX_INT_DIGITS)
    assert not _nothing_to_refuse("[" * (MAX_DEPTH + 1))
    assert not _nothing_to_refuse("a = 1  # ²")   # a digit str.isdigit sees, the regex does not
