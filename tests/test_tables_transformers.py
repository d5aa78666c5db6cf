"""rope_cos_sin against Hugging Face transformers itself: its rotary embedding module's cos/sin for the same
config. Runs where the `hf` extra is installed (`pip install ".[hf]"`), skipped elsewhere."""
import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from test_tables import CONFIGS, POSITIONS  # noqa: E402
from transformers import LlamaConfig  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

import ms_rotary  # noqa: E402
from tools.rope_families import MATCH, torch_in_float64  # noqa: E402


@pytest.mark.parametrize("name", CONFIGS)
def test_matches_transformers_rotary_embedding(name):
    dim, base, scaling, max_pos = CONFIGS[name]
    parameters = dict(scaling or {"rope_type": "default"})
    parameters.setdefault("rope_type", parameters.pop("type", "default"))
    parameters.setdefault("rope_theta", base)
    config = LlamaConfig(hidden_size=dim * 2, num_attention_heads=2, head_dim=dim, max_position_embeddings=max_pos,
                         rope_parameters=parameters)
    with torch_in_float64():  # transformers' own code, its fp32 casts made float64
        cos_hf, sin_hf = LlamaRotaryEmbedding(config)(torch.zeros(1), torch.tensor(POSITIONS[None]))  # cat(f, f)
    cos, sin = ms_rotary.rope_cos_sin(POSITIONS, dim, "half", base, scaling, max_pos)
    for got, want in ((cos, cos_hf), (sin, sin_hf)):
        want = want[0].numpy()
        np.testing.assert_allclose(got.asnumpy()[0, :, 0], want, atol=MATCH * np.abs(want).max(), rtol=0)
