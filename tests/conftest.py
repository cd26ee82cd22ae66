"""Shared fixtures: the devices this machine has (CUDA cases skip cleanly without a GPU)."""

import pytest
import torch

NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=NO_CUDA)]
LOW_PRECISION = [torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
