"""The large shapes the benchmarks report: run.py through MindSpore, kernel_ab.py on the kernel alone."""
LARGE_CASES = [  # (label, shape, slice, mode, dtype)
    ("GPT-NeoX-like", (4, 4096, 32, 128), (0, 64), 0, "float32"),
    ("GPT-NeoX-like", (4, 4096, 32, 128), (0, 64), 0, "bfloat16"),
    ("GLM-like", (4, 4096, 32, 128), (0, 64), 1, "float32"),
    ("DeepSeek-like", (2, 4096, 16, 192), (128, 192), 3, "float32"),
    ("DeepSeek-like", (2, 4096, 16, 192), (128, 192), 3, "bfloat16"),
]
# Cost follows the slice, not D: fp32, half mode, slice [0, 64) of dy [1, 8192, 32, D], for each D here.
D_SCALING_ROWS, D_SCALING_DS = (1, 8192, 32), (64, 1024)
