"""Data-parallel training under MindSpore's own launcher: the demo on 2 CPU workers (msrun, DATA_PARALLEL,
gradients_mean) ends with the same weights on both ranks, and with the weights of one process trained on the
whole batch (the loss is a mean, so the averaged gradient is the whole batch's)."""
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest

DEMO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "train_tiny_lm.py")
# The layer's self-check runs in test_examples; here only the training is compared.
STEPS = ["--mode", "interleave-half", "--steps", "6", "--no-check-loss", "--no-self-check"]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(shutil.which("msrun") is None, reason="msrun (installed with mindspore) is not on PATH")
def test_msrun_two_workers_match_one_process(tmp_path):
    workers = subprocess.Popen(
        ["msrun", "--worker_num=2", "--local_worker_num=2", f"--master_port={_free_port()}",
         f"--log_dir={tmp_path / 'logs'}", "--join=True", DEMO, *STEPS, "--data-parallel",
         "--save-weights", str(tmp_path / "rank{rank}.npz")],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    single = subprocess.run([sys.executable, DEMO, *STEPS, "--save-weights", str(tmp_path / "single.npz")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    out, _ = workers.communicate(timeout=300)
    logs = "".join(p.read_text()[-3000:] for p in (tmp_path / "logs").glob("worker_*.log"))
    assert workers.returncode == 0, out[-3000:] + logs
    assert single.returncode == 0, single.stdout[-3000:] + single.stderr[-3000:]
    assert "rank 1 of 2, data parallel" in logs
    rank0, rank1, whole = (np.load(tmp_path / f"{name}_interleave-half.npz") for name in ("rank0", "rank1", "single"))
    assert sorted(rank0) == sorted(whole) and len(rank0) > 10
    for name in rank0:
        np.testing.assert_array_equal(rank0[name], rank1[name], err_msg=name)
        np.testing.assert_allclose(rank0[name], whole[name], rtol=1e-4, atol=1e-5, err_msg=name)
