import pytest

from data_helpers import make_dataset


@pytest.fixture
def small_dataset():
    return make_dataset()
