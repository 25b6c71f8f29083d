"""Differential test: our subset validator agrees with jsonschema's Draft 2020-12 validator.

A hand-written validator is only trustworthy if it accepts and refuses exactly what the
standard says. For schemas generated inside the subset and values generated around their
bounds (valid and invalid), ``host.formats.schema`` must agree with ``jsonschema``. Deliberate
divergences are kept out of the generated values: lone surrogates and non-finite floats
(we refuse them; jsonschema does not care) and the byte budget (values stay tiny).
"""

from __future__ import annotations

import os
from typing import Any

import jsonschema
import pytest
import rfc8785
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from host.errors import InputInvalid
from host.formats.schema import canonicalize, check_schema
from tests.support.schemas import root_object_schemas, subset_schemas, values_for

# values_for draws one value per schema node, so examples are larger than hypothesis
# expects of a strategy; the generated data is still small (a few KiB at most).
# 600 examples per run (was 2,000: 60 s of a 2-core CI run); hypothesis keeps the failing
# examples it finds in its database, and a deeper search is one environment variable away:
# STOCKADE_FUZZ_EXAMPLES=20000 python -m pytest tests/unit/host/test_schema_differential.py
_SETTINGS = settings(
    max_examples=int(os.environ.get("STOCKADE_FUZZ_EXAMPLES", "600")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _ours(schema: dict[str, Any], value: Any) -> bytes | None:
    try:
        return canonicalize(schema, value)
    except InputInvalid:
        return None


def _assert_agrees(schema: dict[str, Any], value: Any) -> bool:
    jsonschema.Draft202012Validator.check_schema(schema)
    check_schema(schema, root_object=schema["type"] == "object")
    expected = jsonschema.Draft202012Validator(schema).is_valid(value)
    got = _ours(schema, value)
    assert (got is not None) == expected, (schema, value)
    if got is not None:
        assert got == rfc8785.dumps(value)
    return expected


@_SETTINGS
@given(data=st.data())
def test_subset_validator_agrees_with_draft_2020_12(data: st.DataObject) -> None:
    schema = data.draw(subset_schemas(depth=4), label="schema")
    value = data.draw(values_for(schema), label="value")
    # Statistics (--hypothesis-show-statistics) show both outcomes well exercised.
    event("accepted" if _assert_agrees(schema, value) else "refused")


@_SETTINGS
@given(data=st.data())
def test_input_validator_agrees_with_draft_2020_12(data: st.DataObject) -> None:
    schema = data.draw(root_object_schemas(depth=4), label="schema")
    value = data.draw(values_for(schema), label="value")
    event("accepted" if _assert_agrees(schema, value) else "refused")


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "integer", "minimum": 0, "maximum": 5}, 1.0),
        ({"type": "integer", "minimum": 0, "maximum": 5}, True),
        ({"type": "number", "minimum": 0, "maximum": 5}, False),
        ({"type": "array", "maxItems": 3, "uniqueItems": True,
          "items": {"type": "integer", "minimum": 0, "maximum": 5}}, [1, 1.0]),
        ({"type": "array", "maxItems": 3, "uniqueItems": True,
          "items": {"type": "array", "maxItems": 2, "items": {"type": "integer", "minimum": 0, "maximum": 5}}},
         [[1, 2], [1.0, 2]]),
        ({"type": "string", "maxLength": 1}, "😀"),
        ({"type": "string", "maxLength": 1}, "e\u0301"),
    ],
    ids=["integral-float", "bool-as-integer", "bool-as-number", "unique-int-float",
         "unique-nested-respelled", "astral-one-code-point", "combining-two-code-points"],
)
def test_known_edge_cases_agree_with_draft_2020_12(schema: dict[str, Any], value: Any) -> None:
    _assert_agrees(schema, value)
