"""rope_cos_sin against Hugging Face transformers itself: its rotary embedding module's cos/sin for the same
config. Runs where the `hf` extra is installed (`pip install ".[hf]"`), skipped elsewhere."""
import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from test_tables import CONFIGS, POSITIONS, TOLERANCE  # noqa: E402
from transformers import LlamaConfig  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

import ms_rotary  # noqa: E402


@pytest.mark.parametrize("name", CONFIGS)
def test_matches_transformers_rotary_embedding(name):
    dim, base, scaling, max_pos = CONFIGS[name]
    parameters = dict(scaling or {"rope_type": "default"})
    parameters.setdefault("rope_type", parameters.pop("type", "default"))
    parameters.setdefault("rope_theta", base)
    config = LlamaConfig(hidden_size=dim * 2, num_attention_heads=2, head_dim=dim, max_position_embeddings=max_pos,
                         rope_parameters=parameters)
    rotary = LlamaRotaryEmbedding(config)
    positions = torch.tensor(POSITIONS[None])
    cos_hf, sin_hf = rotary(torch.zeros(1, dtype=torch.float32), positions)  # cat(f, f), times attention factor
    cos, sin = ms_rotary.rope_cos_sin(POSITIONS, dim, "half", base, scaling, max_pos)
    np.testing.assert_allclose(cos.asnumpy()[0, :, 0], cos_hf[0].numpy(), atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(sin.asnumpy()[0, :, 0], sin_hf[0].numpy(), atol=TOLERANCE, rtol=0)
