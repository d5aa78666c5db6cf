"""The benchmark configuration run.py (through MindSpore) and kernel_ab.py (the kernel alone) share."""
LARGE_CASES = [  # (label, shape, slice, mode, dtype)
    ("GPT-NeoX-like", (4, 4096, 32, 128), (0, 64), 0, "float32"),
    ("GPT-NeoX-like", (4, 4096, 32, 128), (0, 64), 0, "bfloat16"),
    ("GLM-like", (4, 4096, 32, 128), (0, 64), 1, "float32"),
    ("DeepSeek-like", (2, 4096, 16, 192), (128, 192), 3, "float32"),
    ("DeepSeek-like", (2, 4096, 16, 192), (128, 192), 3, "bfloat16"),
]
# The head norm's forward before a whole-head rotation, in place (kernel_ab --norm): a Qwen3-like prefill's q and
# k heads together ([1, 4096, 32 + 8, 128]) and Gemma-3's 256-lane heads.
NORM_CASES = [  # (label, shape, slice, mode, dtype)
    ("Qwen3-like", (1, 4096, 40, 128), (0, 128), 0, "float32"),
    ("Qwen3-like", (1, 4096, 40, 128), (0, 128), 0, "bfloat16"),
    ("Gemma-3-like", (1, 4096, 12, 256), (0, 256), 0, "bfloat16"),
]
# Cost follows the slice, not D: fp32, half mode, slice [0, 64) of dy [1, 8192, 32, D], for each D here.
D_SCALING_ROWS, D_SCALING_DS = (1, 8192, 32), (64, 1024)
# The same-bytes loop (slice_touch.c), compiled the same way by run.py and kernel_ab.py.
LOOP_FLAGS = ["-O3", "-march=native", "-pthread"]
