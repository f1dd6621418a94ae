import os

import pytest
import torch

# Same thread count as the benchmarks and CI machines; keeps eager and core comparable.
torch.set_num_threads(int(os.environ.get("DNNFUSION_TEST_THREADS", "2")))


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
