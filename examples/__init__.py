"""Examples, each runnable as a script (python examples/gpt_neox_half.py). The benchmarks import the
plain-ops yardstick as examples.rope_common."""
