"""random.choice: draws from a constant list or 0 .. n-1 with the probabilities p, keyed by
the global sample index (the same however the samples are batched), DALI's output types,
and the errors that name the argument."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def
from conveyor.errors import SpecError
from conveyor_server.engine.stages.random_ops import RandomStage


def stage(batch: int = 4, **args: Any) -> RandomStage:
    return RandomStage("random.choice", 2, {"p": None, "shape": (), **args}, batch_size=batch,
                       seed=11)


def test_n_draws_every_value_below_n_equally() -> None:
    draws = stage(a=(5.0,)).draw(0, 20000)
    assert draws.dtype == np.int32 and draws.shape == (20000,)
    counts = np.bincount(draws, minlength=5)
    assert set(np.unique(draws)) == {0, 1, 2, 3, 4}
    assert np.all(np.abs(counts / 20000 - 0.2) < 0.015)


def test_a_list_with_probabilities_and_a_shape() -> None:
    draws = stage(a=(0.5, 1.5, 2.5), p=(0.0, 0.25, 0.75), shape=(3, 2)).draw(0, 8000)
    assert draws.dtype == np.float32 and draws.shape == (8000, 3, 2)
    assert not np.any(draws == 0.5)  # probability 0: never drawn
    assert abs(np.mean(draws == 2.5) - 0.75) < 0.02
    assert stage(a=(3.0, 7.0)).draw(0, 10).dtype == np.int32  # whole numbers: int32


def test_draws_follow_the_global_index_not_the_batching() -> None:
    one = stage(batch=1, a=(10.0,))
    by_one = np.concatenate([np.atleast_1d(one.next()[0]) for _ in range(12)])
    four = stage(batch=4, a=(10.0,))
    by_four = np.concatenate([np.stack(four.next()) for _ in range(3)])
    assert np.array_equal(by_one, by_four)
    assert np.array_equal(stage(a=(10.0,)).draw(5, 3), by_one[5:8])


def test_errors_name_the_argument() -> None:
    with pytest.raises(SpecError, match="'p'.*2 probabilities for 3 values"):
        stage(a=(1.0, 2.0, 3.0), p=(0.5, 0.5))
    with pytest.raises(SpecError, match="'p'.*sums to 0.9"):
        stage(a=(1.0, 2.0), p=(0.4, 0.5))
    with pytest.raises(SpecError, match="'a'.*n >= 1"):
        stage(a=(0.0,))
    # n is bounded before its values are tabulated (1 << 40 once asked for 4 TiB).
    with pytest.raises(SpecError, match="'a': got 1,099,511,627,776: n may be at most "
                                        "1,048,576"):
        stage(a=(float(1 << 40),))


def test_fn_random_choice_takes_a_as_its_first_input() -> None:
    @pipeline_def(batch_size=2, seed=1)
    def two() -> Any:
        return fn.random.choice(4), fn.random.choice([1.5, 2.5], p=[0.3, 0.7], shape=(2,))

    first, second = two().spec.ops
    assert first.type == second.type == "random.choice"
    assert list(first.args["a"].floats.values) == [4.0]
