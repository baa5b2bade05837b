import pytest
import torch

import torch_wrs  # noqa: F401  (loads torch.ops.wrs)

HAS_CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)
