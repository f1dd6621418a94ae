import os
import tempfile

import pytest
import torch

# Plans must not depend on what this machine tuned or profiled before (a used CI machine keeps
# ~/.cache/dnnfusion): the session gets empty tuning and profile databases of its own. Tests that
# exercise the databases pass explicit paths.
_SESSION_DBS = tempfile.mkdtemp(prefix="dnnfusion-test-dbs-")
os.environ["DNNFUSION_TUNING_DB"] = os.path.join(_SESSION_DBS, "tuning_db.txt")
os.environ["DNNFUSION_PROFILE_DB"] = os.path.join(_SESSION_DBS, "profile_db.txt")

# Same thread count as the benchmarks and CI machines; keeps eager and core comparable.
torch.set_num_threads(int(os.environ.get("DNNFUSION_TEST_THREADS", "2")))


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
