import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def golden_dir():
    return ROOT / "tests" / "data" / "tf"
