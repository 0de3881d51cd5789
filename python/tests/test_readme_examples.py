"""The README's Python examples run as written."""
import pathlib
import re

import pytest
from conftest import import_torch

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{k}" for k in range(len(BLOCKS))])
def test_readme_example_runs(code):
    if "torch" in code:
        import_torch("the README's PyTorch example")
    exec(compile(code, str(README), "exec"), {})
