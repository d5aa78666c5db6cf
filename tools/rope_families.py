"""Which transformers families ms_rotary rotates exactly as transformers does, found by running them: for each
model type whose modeling module has a rotary class and `apply_rotary_pos_emb`, its default config (its text
config for multimodal ones) read by RopeConfig in each lane layout, cos/sin and the rotation compared with
transformers' own on q at positions up to 3500. Writes ms_rotary/families.py (the layout of each family that
matched, and the rope parameters its config class gives a config.json that lacks them); tests/test_families.py
runs the same comparison against the committed table.
    python -m tools.rope_families            # needs torch and transformers; rewrites ms_rotary/families.py
"""
import contextlib
import functools
import importlib
import inspect
import logging
import os
import re
import warnings

import numpy as np

POSITIONS = np.array([0, 1, 5, 17, 300, 2047, 3500])
# A match: max |ms_rotary - transformers| / max |transformers| with transformers' code in float64; ms_rotary's
# tables are float64 rounded once to fp32 (2**-24 relative), q rotated in fp32: ~1e-7 where the formulas agree.
MATCH = 1e-6
MODES = ("half", "interleave")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT, DOCS = os.path.join(ROOT, "ms_rotary", "families.py"), os.path.join(ROOT, "docs", "families.md")
README = os.path.join(ROOT, "README.md")
README_BEGIN, README_END = "<!-- families: written by python -m tools.rope_families -->", "<!-- /families -->"
# Families a README reader looks for first; the README table shows those the table holds, under their layout.
WELL_KNOWN = ("llama", "llama4_text", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next",
              "qwen2_vl", "qwen2_5_vl", "qwen3_vl", "gemma2", "gemma3_text", "gemma3n_text", "gemma4_text", "phi3",
              "phimoe", "gpt_neox", "olmo2", "olmo3", "granite", "smollm3", "exaone4", "gpt_oss", "ernie4_5",
              "hunyuan_v1_dense", "seed_oss", "minicpm3", "glm", "glm4", "glm4_moe", "glm4v", "glm4v_moe", "chatglm",
              "gptj", "cohere", "cohere2", "deepseek_v2", "deepseek_v3", "deepseek_v4")


# Families compared under fields their default config lacks: their checkpoints', or the switch that turns rope on.
CHECKPOINT_FIELDS = {
    # default head_dim 42 x partial 0.5: 21 rotated lanes, odd (transformers rotates 22 with the exponent over
    # 21; ms_rotary refuses odd widths); GLM-4.5-Air's config.json gives head_dim 128, so 64 lanes
    "glm4_moe": {"head_dim": 128},
    # its shared attention rotates only with use_mem_rope (default False: from_config refuses that by name)
    "zamba2": {"use_mem_rope": True},
}


def rotary_module(model_type):
    """(default text config, rotary class, apply function) of a transformers model type, or None."""
    from transformers import CONFIG_MAPPING
    config_class = CONFIG_MAPPING[model_type]
    try:
        module = importlib.import_module(config_class.__module__.replace("configuration_", "modeling_"))
        config = config_class(**CHECKPOINT_FIELDS.get(model_type, {}))
        config = config.get_text_config() if hasattr(config, "get_text_config") else config
    except Exception:  # noqa: BLE001 (a module that needs other packages, a config that needs arguments)
        return None
    classes = [getattr(module, name) for name in dir(module)
               if name.endswith("RotaryEmbedding") and inspect.isclass(getattr(module, name))]
    text = [c for c in classes if "Vision" not in c.__name__ and "Audio" not in c.__name__]
    apply = getattr(module, "apply_rotary_pos_emb", None)
    if not text or apply is None:
        return None
    used = _rotary_classes_used(module, type(config))
    return config, getattr(module, used[0]) if len(used) == 1 else text[0], apply


def _rotary_classes_used(module, config_class):
    """The rotary classes the module's models built from config_class make (`self.rotary_emb = X(...)`): where a
    module has several (Qwen2.5-Omni's text decoder and DiT), the one this config's decoder rotates with."""
    used = set()
    for name, body in _class_sources(module.__file__):
        if name.endswith("Model") and (re.search(rf"config: {config_class.__name__}\b", body) or
                                       getattr(getattr(module, name, None), "config_class", None) is config_class):
            used |= set(re.findall(r"self\.rotary_emb = (\w+RotaryEmbedding)", body))
    return sorted(used)


@functools.lru_cache(maxsize=None)
def _class_sources(path):
    """(name, source) of each top-level class in a module's file, split on its `class` lines (read once)."""
    with open(path) as f:
        text = f.read()
    starts = [(m.start(), m.group(1)) for m in re.finditer(r"^class (\w+)", text, re.M)] + [(len(text), None)]
    return tuple((name, text[start:end]) for (start, name), (end, _) in zip(starts, starts[1:]))


def layer_types(model_type):
    """The layer types whose rope parameters differ in the family's default config ([None] if not nested): those
    its layers use (a rotary class such as Mellum's builds only the types in config.layer_types)."""
    config = rotary_module(model_type)[0]
    parameters = getattr(config, "rope_parameters", None) or {}
    nested = [key for key, value in parameters.items() if isinstance(value, dict)]
    used = set(getattr(config, "layer_types", None) or ()) & set(nested)  # DeepSeek-V4's keys are no layer types
    return [key for key in nested if key in used or not used] or [None]


@contextlib.contextmanager
def torch_in_float64():
    """transformers' rotary code run in float64: its float32 casts (`.float()`, dtype=torch.float in factories
    and `.to`) made float64, so a comparison sees its formulas rather than fp32's rounding of the angles (at
    position 3500 an fp32 angle is off by up to 2.4e-4, its inverse frequencies by 6e-8 relative)."""
    import torch
    saved = {name: getattr(torch, name) for name in _TORCH_FACTORIES}
    float_method, to_method, default = torch.Tensor.float, torch.Tensor.to, torch.get_default_dtype()

    def widened(dtype):
        return torch.float64 if dtype in (torch.float32, torch.float16, torch.bfloat16) else dtype

    def factory(function):
        def call(*args, **kwargs):
            if "dtype" in kwargs:
                kwargs["dtype"] = widened(kwargs["dtype"])
            return function(*args, **kwargs)
        return call

    def to(self, *args, **kwargs):
        args = tuple(widened(a) if isinstance(a, torch.dtype) else a for a in args)
        if "dtype" in kwargs:
            kwargs["dtype"] = widened(kwargs["dtype"])
        return to_method(self, *args, **kwargs)

    torch.set_default_dtype(torch.float64)
    torch.Tensor.float, torch.Tensor.to = torch.Tensor.double, to
    for name, function in saved.items():
        setattr(torch, name, factory(function))
    try:
        yield
    finally:
        torch.Tensor.float, torch.Tensor.to = float_method, to_method
        for name, function in saved.items():
            setattr(torch, name, function)
        torch.set_default_dtype(default)


_TORCH_FACTORIES = ("arange", "linspace", "ones", "zeros", "full", "tensor", "empty", "ones_like", "zeros_like")


def compare(model_type, mode, layer_type=None):
    """max |ms_rotary - transformers| / max |transformers| of q rotated at POSITIONS under the family's default
    config (for one of its layer types), transformers' code run in float64 (torch_in_float64), or the reason it
    cannot be compared (a string)."""
    import mindspore as ms

    import ms_rotary
    found = rotary_module(model_type)
    if found is None:
        return "no rotary class and apply_rotary_pos_emb"
    config, rotary_class, apply = found
    try:
        rope = ms_rotary.RopeConfig.from_config(config.to_dict() | {"model_type": model_type}, rotary_mode=mode,
                                                layer_type=layer_type)
        positions = POSITIONS[POSITIONS < (rope.max_position_embeddings or 1 << 30)]
        if rope.mrope_section is not None:  # positions that differ by axis (time, height, width, ...): [N, 1, S]
            axes = [positions, positions[::-1], (positions * 7 + 3) % (positions.max() + 1), positions // 3]
            positions = np.stack(axes[:len(rope.mrope_section)])[:, None]
        q = np.random.default_rng(0).uniform(-1, 1, (1, positions.shape[-1], 2, rope.head_dim)).astype(np.float32)
        cos, sin = rope.cos_sin(positions)
        got = ms_rotary.PartialRotaryMul(rope.rotary_mode, list(rope.partial_slice))(ms.Tensor(q), cos, sin).asnumpy()
    except Exception as error:  # noqa: BLE001
        return f"ms_rotary: {error}"
    with torch_in_float64():
        expected = _transformers_rotated(config, rotary_class, apply, rope, positions, q, layer_type)
    if isinstance(expected, str):
        return expected
    return float(np.abs(got - expected).max() / np.abs(expected).max())


def _transformers_rotated(config, rotary_class, apply, rope, positions, q, layer_type):
    """q rotated by transformers' own rotary class and apply function at `positions`, or why it cannot be."""
    import torch
    try:
        by_type = {} if layer_type is None else {"layer_type": layer_type}
        ids = torch.tensor(positions if positions.ndim == 3 else positions[None])
        cos_hf, sin_hf = rotary_class(config)(torch.zeros(1), ids, **by_type)
    except Exception as error:  # noqa: BLE001
        return f"transformers: {type(error).__name__}: {error}"
    if positions.ndim == 1 and positions[0] == 0 and not cos_hf[..., 0, :].any():  # GPT-J's, CodeGen's: (sin, cos)
        cos_hf, sin_hf = sin_hf, cos_hf
    start, end = rope.partial_slice
    try:
        return _applied(apply, q, cos_hf, sin_hf)
    except RuntimeError as error:  # a family whose attention hands apply only the rotated lanes (Persimmon)
        if (start, end) == (0, rope.head_dim):
            return f"transformers: {type(error).__name__}: {error}"
        try:
            part = _applied(apply, q[..., start:end], cos_hf, sin_hf)
        except Exception as error:  # noqa: BLE001
            return f"transformers: {type(error).__name__}: {error}"
        return np.concatenate([q[..., :start], part, q[..., end:]], -1)
    except Exception as error:  # noqa: BLE001
        return f"transformers: {type(error).__name__}: {error}"


def _applied(apply, q, cos, sin):
    """transformers' apply function on q [B, S, N, D] (its heads second), its arguments by name: (q, k, cos,
    sin), (x, cos, sin) or GPT-J's and CodeGen's (tensor, sin, cos), which takes q as [B, S, N, D]."""
    import torch
    names = list(inspect.signature(apply).parameters)
    if names[:3] == ["tensor", "sin", "cos"]:
        return apply(torch.tensor(q), sin=sin, cos=cos).numpy()
    q_hf = torch.tensor(q).transpose(1, 2)
    if names[0] == "args":  # a wrapper that hides the names: transformers' usual order
        out = apply(q_hf, q_hf, cos, sin)
    else:
        out = apply(**{"cos": cos, "sin": sin, names[0]: q_hf, **({"k": q_hf} if names[1] == "k" else {})})
    return (out[0] if isinstance(out, tuple) else out).transpose(1, 2).numpy()


def default_rope_parameters(model_type):
    config = rotary_module(model_type)[0]
    parameters = dict(getattr(config, "rope_parameters", None) or {})
    extra = {key: getattr(config, key) for key in ("partial_rotary_factor",) if getattr(config, key, None) is not None}
    return {**extra, **parameters}


# Families whose attention does not call the module's apply_rotary_pos_emb as compared here (rope_config's
# hand-checked entries hold them).
APPLIED_ELSEWHERE = {
    "deepseek_v3": "its attention calls apply_rotary_pos_emb_interleave (rope_interleave, the default)",
    "glm4_moe_lite": "DeepSeek-V3's attention: apply_rotary_pos_emb_interleave on each head's rope part"}


def discover():
    """({model_type: (layout, default rope parameters)} of the families that match (MATCH), the largest
    difference among their comparisons and its family)."""
    from transformers import CONFIG_MAPPING
    found, largest = {}, (0.0, None)
    for model_type in sorted(CONFIG_MAPPING.keys()):
        if model_type in APPLIED_ELSEWHERE or rotary_module(model_type) is None:
            continue
        for mode in MODES:
            errors = [compare(model_type, mode, layer_type) for layer_type in layer_types(model_type)]
            if all(not isinstance(error, str) and error < MATCH for error in errors):
                found[model_type] = (mode, default_rope_parameters(model_type))
                largest = max(largest, (max(errors), model_type))
                break
    return found, largest


def main():
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    found, (largest, where) = discover()
    import transformers
    with open(OUT, "w") as f:
        f.write(f'"""Generated by `python -m tools.rope_families` from transformers {transformers.__version__}; do not '
                'edit.\nmodel_type: (lane layout, the rope parameters its config class gives a config.json that lacks '
                'them,\nor None for rope_theta 10000 and no scaling)."""\n')
        f.write("# ruff: noqa: E501\nTRANSFORMERS_FAMILIES = {\n")
        for model_type, (mode, parameters) in found.items():
            plain = parameters in ({}, {"rope_theta": 10000.0, "rope_type": "default"})  # {}: GPT-J's fixed 10000
            f.write(f"    {model_type!r}: ({mode!r}, {None if plain else dict(sorted(parameters.items()))!r}),\n")
        f.write("}\n")
    import ms_rotary.families
    import ms_rotary.rope_config
    importlib.reload(ms_rotary.families)
    importlib.reload(ms_rotary.rope_config)
    with open(DOCS, "w") as f:
        f.write(families_markdown())
    with open(README) as f:
        text = f.read()
    with open(README, "w") as f:
        f.write(with_readme_families(text))
    print(f"{len(found)} families -> {OUT}, {os.path.normpath(DOCS)}, README.md; the largest difference from "
          f"transformers in float64: {largest:.2e} of the largest value ({where})")


def _rope_types(parameters):
    if not parameters:
        return {"default"}
    if all(v is None or isinstance(v, dict) for v in parameters.values()):  # per layer type (None: no rope)
        return set().union(*(_rope_types(v) for v in parameters.values() if v is not None))
    return {parameters.get("rope_type", parameters.get("type", "default"))}


def readme_families():
    """README's family table: per layout, how many model types, the rope types their defaults use, and the
    well-known ones among them."""
    from ms_rotary.rope_config import FAMILY_MODES, FAMILY_ROPE_DEFAULTS
    lines = ["| layout | model types | rope types of their defaults | among them |", "|---|---|---|---|"]
    for layout in ("half", "interleave", "quarter", "interleave-half"):
        types = sorted(t for t, mode in FAMILY_MODES.items() if mode == layout)
        if not types:
            continue
        rope_types = sorted(set().union(*(_rope_types(FAMILY_ROPE_DEFAULTS.get(t)) for t in types)))
        known = ", ".join(f"`{t}`" for t in WELL_KNOWN if t in types)
        lines.append(f"| {layout} | {len(types)} | {', '.join(rope_types)} | {known} |")
    return "\n".join(lines) + "\n"


def with_readme_families(text):
    """README text with its family table (between README_BEGIN and README_END) written afresh."""
    head, rest = text.split(README_BEGIN + "\n", 1)
    _, tail = rest.split(README_END, 1)
    return head + README_BEGIN + "\n" + readme_families() + README_END + tail



def families_markdown():
    """docs/families.md: every family from_config knows, its layout and default rope parameters."""
    from ms_rotary.families import TRANSFORMERS_FAMILIES
    from ms_rotary.rope_config import FAMILY_MODES, FAMILY_ROPE_DEFAULTS
    lines = ["# Model families `from_config` knows", "",
             "Generated by `python -m tools.rope_families` from `ms_rotary/rope_config.py` (do not edit). "
             "\"checked against transformers\": tools/rope_families.py found the family's default config rotating "
             "as transformers' own rotary class and `apply_rotary_pos_emb` do (tests/test_families.py repeats it "
             "where transformers is installed); \"checked by hand\": tests/test_rope_config.py and "
             "tests/test_embedding.py compare it with transformers. Defaults: what a config.json without rope keys "
             "gets (its transformers config class's); blank: theta 10000, no scaling.", "",
             "| model_type | layout | checked | defaults |", "|---|---|---|---|"]
    for model_type in sorted(FAMILY_MODES):
        how = "against transformers" if model_type in TRANSFORMERS_FAMILIES else "by hand"
        defaults = FAMILY_ROPE_DEFAULTS.get(model_type)
        shown = "" if defaults is None else ", ".join(f"{k}: {v}" for k, v in defaults.items()
                                                       if not isinstance(v, list))
        lines.append(f"| `{model_type}` | {FAMILY_MODES[model_type]} | {how} | {shown} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
