"""The examples run as a user runs them: each attention layer's self-check against plain MindSpore ops,
and a short run of the training demo whose loss must fall."""
import os
import subprocess
import sys

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")
LAYER_EXAMPLES = ["gpt_neox_half", "glm4_interleave", "chatglm_2d_quarter", "deepseek_mla_interleave_half"]


def run_example(*args):
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_attention_examples_self_check():
    """Each example as `python examples/NAME.py` runs it (as __main__), the four in one process: MindSpore's
    start-up once."""
    paths = [os.path.join(EXAMPLES, f"{name}.py") for name in LAYER_EXAMPLES]
    out = run_example("-c", "import os, runpy, sys\nsys.path.insert(0, os.path.dirname(sys.argv[1]))\n"
                      "for path in sys.argv[1:]:\n    print('[example]', path, flush=True)\n"
                      "    runpy.run_path(path, run_name='__main__')", *paths)
    for name, part in zip(LAYER_EXAMPLES, out.split("[example] ")[1:]):
        lines = [line for line in part.splitlines() if line.startswith("[self-check]")]
        assert len(lines) == 2 and all(line.endswith("OK") for line in lines), (name, part)
    assert out.count("[example] ") == len(LAYER_EXAMPLES), out


def test_training_demo_loss_falls():
    out = run_example(os.path.join(EXAMPLES, "train_tiny_lm.py"), "--mode", "interleave-half", "--steps", "60")
    assert "[interleave-half] loss" in out


def test_llama3_decode_example_matches_the_full_sequence():
    out = run_example(os.path.join(EXAMPLES, "llama3_decode.py"))
    assert any(line.startswith("[self-check]") and line.endswith("OK") for line in out.splitlines()), out


def test_qwen2_vl_mrope_example_self_checks():
    out = run_example(os.path.join(EXAMPLES, "qwen2_vl_mrope.py"))
    lines = [line for line in out.splitlines() if line.startswith("[self-check]")]
    assert len(lines) == 4 and all(line.endswith("OK") for line in lines), out


def test_device_check_agrees_on_cpu_and_refuses_a_missing_device():
    # The same script an Ascend user runs first; on CPU the compiled kernel equals numpy bit for bit.
    out = run_example(os.path.join(EXAMPLES, "ascend_check.py"), "--device", "CPU")
    assert "ascend check: 252/252 cases agree on CPU" in out
    assert all(line.endswith("0.00e+00") for line in out.splitlines() if line.startswith("ok")), out
    missing = subprocess.run([sys.executable, os.path.join(EXAMPLES, "ascend_check.py")], capture_output=True,
                             text=True, timeout=600)
    if missing.returncode != 0:  # no Ascend here: a clear refusal, not a traceback
        assert missing.returncode == 2 and "cannot use device Ascend" in missing.stderr, missing.stderr[-2000:]
