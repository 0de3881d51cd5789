import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def golden_dir():
    return ROOT / "tests" / "data" / "tf"


def import_torch(what):
    """torch, for the PyTorch tests of `what`. Where the test requirements are installed
    (BLOCKLSTM_REQUIRE_TORCH=1, which scripts/bootstrap.sh test sets), a torch that is missing or
    fails to import is a failure; elsewhere the tests skip, saying which of the two it was."""
    try:
        import torch
        return torch
    except Exception as e:  # ImportError, or whatever a broken install raises while importing
        missing = isinstance(e, ModuleNotFoundError) and e.name == "torch"
        reason = "torch is not installed" if missing else f"torch fails to import ({type(e).__name__}: {e})"
        if os.environ.get("BLOCKLSTM_REQUIRE_TORCH") == "1":
            pytest.fail(f"{reason}, but BLOCKLSTM_REQUIRE_TORCH=1: {what} must run here", pytrace=False)
        pytest.skip(f"{reason}: {what} skipped", allow_module_level=True)


def cuda_skip_reason(torch):
    """Why the CUDA cases cannot run here, or None. Where torch sees a CUDA device, blocklstm (built
    with CUDA) must see it too: the cases then run, and fail if it does not."""
    import blocklstm
    if not torch.cuda.is_available():
        return "torch sees no CUDA device: CUDA cases skipped"
    if not blocklstm.cuda_built():
        return "blocklstm is built without CUDA: CUDA cases skipped"
    return None


def devices(torch):
    """["cpu", "cuda"] for parametrize, the CUDA case skipped with its reason where it cannot run."""
    reason = cuda_skip_reason(torch)
    return ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(reason is not None, reason=str(reason)))]
