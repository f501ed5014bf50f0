"""Schema rules the reductions and transforms brought: operators with optional or many
inputs, and one int where DALI takes a list of ints."""

from __future__ import annotations

import pytest

from conveyor.definition.schemas.registry import SCHEMAS, decode_value, encode_arg
from conveyor.errors import SpecError


def test_input_counts_in_words() -> None:
    assert list(SCHEMAS["transforms.rotation"].input_counts) == [0, 1]
    assert SCHEMAS["transforms.rotation"].inputs_text() == "0 or 1"
    assert SCHEMAS["transforms.combine"].inputs_text() == "2 to 99"
    assert SCHEMAS["reductions.std_dev"].inputs_text() == "2"
    assert list(SCHEMAS["rotate"].input_counts) == [1]


def test_one_int_is_a_list_of_one_as_dali_takes_it() -> None:
    assert decode_value(encode_arg("reductions.sum", "axes", -1)) == (-1,)
    assert decode_value(encode_arg("reductions.sum", "axes", [])) == ()
    for bad in (True, 1.0, "0"):
        with pytest.raises(SpecError, match="'axes': got .*, expected a list of ints"):
            encode_arg("reductions.sum", "axes", bad)
