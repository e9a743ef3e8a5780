import sys

sys.path.insert(0, "/app")

from stats import mean  # noqa: E402


def test_mean_of_integers():
    assert mean([1, 2, 3, 4]) == 2.5


def test_mean_of_one():
    assert mean([7]) == 7
