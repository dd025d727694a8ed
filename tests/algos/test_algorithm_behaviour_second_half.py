"""The odd-indexed half of the continuous algorithms through the behaviour test of
``test_algorithm_behaviour.py`` (split in two files so that two xdist workers share it)."""

import pytest
from test_algorithm_behaviour import CONTINUOUS, check_algorithm_behavior, tiny_data  # noqa: F401  (tiny_data: the fixture)


@pytest.mark.parametrize("name", CONTINUOUS[1::2])
def test_algorithm_behavior(name, tiny_data, tmp_path):  # noqa: F811
    check_algorithm_behavior(name, tiny_data, tmp_path)
