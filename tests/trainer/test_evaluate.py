"""Held-out evaluation: pass@k estimator, and scores that are not numbers are never correct."""

from types import SimpleNamespace

import pytest

from steadyrl.trainer.evaluate import _correct, pass_at_k


@pytest.mark.parametrize("n,c,k,expected", [(4, 0, 1, 0.0), (4, 4, 2, 1.0), (4, 1, 1, 0.25), (4, 1, 2, 0.5),
                                             (5, 2, 3, 1 - 1 / 10)])
def test_pass_at_k_is_the_unbiased_estimator(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_rejects_k_above_n():
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(2, 1, 3)


def test_nan_inf_and_missing_scores_are_not_correct():
    result = SimpleNamespace(raw={"r": [1.0, float("inf"), float("nan"), None, 0.5]})
    assert _correct(result, "r", 1.0) == [True, False, False, False, False]
