"""The streamed CLIP text encoders against transformers on the same fp16 random weights."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from conftest import pcc
from engine.errors import InputError, ModelFileError
from engine.safetensors import SafetensorsWriter
from engine.sdxl.text_encoder import ClipTextEncoder
from engine.weights import TensorStore
from tiny_models import make_text_model
from tokenizer_files import reference_tokenizers

PROMPTS = ["a photo of a cat!", "x", "", "a lighthouse at dusk, oil painting, (((dramatic))) light!!! 🌅 " * 4]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("clip")
    encoders = make_text_model(root)
    return root, encoders, reference_tokenizers(root)


def reference(model, ids: np.ndarray):
    with torch.no_grad():
        return model(torch.from_numpy(ids), output_hidden_states=True)


@pytest.mark.parametrize("preset", ["default", "rpi", "rpi-lowmem"])
@pytest.mark.parametrize("index", [0, 1])
def test_hidden_states_and_pooled_match_transformers(tiny, preset, index):
    root, models, tokenizers = tiny
    name = ("text_encoder", "text_encoder_2")[index]
    ids = tokenizers[index](PROMPTS, padding="max_length", max_length=77, truncation=True,
                            return_tensors="np").input_ids
    ref = reference(models[index], ids)
    with ClipTextEncoder.load(root / name, preset=preset) as encoder:
        for clip_skip in (0, 1):
            out = encoder(ids, clip_skip=clip_skip, pooled=True)
            expected = ref.hidden_states[-(clip_skip + 2)].numpy()
            assert out.hidden_states.shape == expected.shape and out.hidden_states.dtype == np.float32
            assert pcc(out.hidden_states, expected) >= 0.9999
            assert np.abs(out.hidden_states - expected).max() < 1e-4
        expected_pooled = (ref.text_embeds if index == 1 else ref.pooler_output).numpy()
        assert pcc(out.pooled, expected_pooled) >= 0.9999
        assert np.abs(out.pooled - expected_pooled).max() < 1e-4
        assert encoder(ids).pooled is None


def test_last_layer_is_skipped_when_only_the_penultimate_state_is_needed(tiny):
    root, _, tokenizers = tiny
    ids = tokenizers[0](["a cat"], padding="max_length", max_length=77, return_tensors="np").input_ids
    with ClipTextEncoder.load(root / "text_encoder") as encoder:
        encoder(ids)
        encoder(ids, pooled=True)
        layers = encoder.config.layers
        used = {run: {n.split(".layers.")[1].split(".")[0] for g in plan for n in g if ".layers." in n}
                for run, plan in encoder._plans.items()}
    assert used == {layers - 1: {str(i) for i in range(layers - 1)}, layers: {str(i) for i in range(layers)}}


@pytest.mark.parametrize("eos_token_id", [2, 49407])
def test_pooled_position_follows_transformers_for_legacy_and_current_eos_configs(tmp_path, eos_token_id):
    _, model = make_text_model(tmp_path, seed=3, eos_token_id=eos_token_id)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 49406, size=(3, 77))         # no EOS at all: the two rules disagree
    ids[1, 10] = 49407
    ids[1, 20] = 49407
    with ClipTextEncoder.load(tmp_path / "text_encoder_2") as encoder:
        got = encoder(ids, pooled=True).pooled
    assert pcc(got, reference(model, ids).text_embeds.numpy()) >= 0.9999


@pytest.mark.parametrize("preset", ["default", "rpi-lowmem"])
def test_token_embedding_reads_only_the_rows_a_prompt_uses(tiny, preset, monkeypatch):
    root, _, tokenizers = tiny
    ids = tokenizers[1](["a cat", "a dog!"], padding="max_length", max_length=77, return_tensors="np").input_ids
    reads = []
    real = TensorStore.read_rows

    def spy(store, name, r0, r1):
        reads.append((name, r0, r1))
        return real(store, name, r0, r1)

    monkeypatch.setattr(TensorStore, "read_rows", spy)
    with ClipTextEncoder.load(root / "text_encoder_2", preset=preset) as encoder:
        encoder(ids, pooled=True)
    rows = [r for name, r0, r1 in reads if "token_embedding" in name for r in range(r0, r1)]
    assert sorted(rows) == sorted(set(ids.ravel().tolist()))


def test_hub_files_with_text_model_prefix_fp32_and_position_ids_read_the_same(tiny, tmp_path):
    root, models, tokenizers = tiny
    hub = tmp_path / "text_encoder"
    hub.mkdir()
    shutil.copy(root / "text_encoder" / "config.json", hub / "config.json")
    store = TensorStore([root / "text_encoder" / "model.fp16.safetensors"])
    names = sorted(store.tensors)
    entries = [("text_model." + n, "F32", store.shape(n)) for n in names]
    entries.append(("text_model.embeddings.position_ids", "I64", (1, 77)))
    with open(hub / "model.safetensors", "wb") as f:
        writer = SafetensorsWriter(f, entries, {"format": "pt"})
        for n in names:
            writer.write("text_model." + n, store.read(n))
        writer.write("text_model.embeddings.position_ids", np.arange(77, dtype=np.int64)[None])
        writer.close()
    store.close()
    ids = tokenizers[0](PROMPTS, padding="max_length", max_length=77, truncation=True,
                        return_tensors="np").input_ids
    with ClipTextEncoder.load(hub) as encoder:
        assert encoder.prefix == "text_model."
        got = encoder(ids).hidden_states
    assert pcc(got, reference(models[0], ids).hidden_states[-2].numpy()) >= 0.9999


def test_bad_inputs_are_input_errors(tiny):
    root, _, _ = tiny
    with ClipTextEncoder.load(root / "text_encoder") as encoder:
        ok = np.full((1, 77), 49407)
        with pytest.raises(InputError, match="clip_skip must be an integer from 0 to 1"):
            encoder(ok, clip_skip=2)
        with pytest.raises(InputError, match="clip_skip"):
            encoder(ok, clip_skip=-1)
        with pytest.raises(InputError, match="token id 49408 is outside the vocabulary"):
            encoder(np.full((1, 77), 49408))
        with pytest.raises(InputError, match="78 tokens in one sequence"):
            encoder(np.zeros((1, 78), dtype=np.int64))
        with pytest.raises(InputError, match="integer array"):
            encoder(np.zeros((1, 77), dtype=np.float32))


def test_model_file_problems_name_the_file_and_tensor(tiny, tmp_path):
    root, _, _ = tiny
    broken = tmp_path / "text_encoder"
    shutil.copytree(root / "text_encoder", broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    with pytest.raises(ModelFileError, match=r"config.json: hidden_act 'relu' is not supported"):
        ClipTextEncoder.load(broken)
    (broken / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 4}))
    with pytest.raises(ModelFileError, match=r"tensor 'encoder.layers.3.self_attn.q_proj.weight' is missing"):
        ClipTextEncoder.load(broken)
    (broken / "config.json").write_text(json.dumps({**config, "hidden_size": 48}))
    with pytest.raises(ModelFileError, match=r"has shape \[49408, 32\] but config.json implies \[49408, 48\]"):
        ClipTextEncoder.load(broken)
    (broken / "model.fp16.safetensors").unlink()
    with pytest.raises(ModelFileError, match="no weights found; expected model.safetensors"):
        ClipTextEncoder.load(broken)
