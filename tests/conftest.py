"""Shared fixtures: the devices this machine has (CUDA cases skip cleanly without a GPU)."""

import pytest
import torch

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))]
LOW_PRECISION = [torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
