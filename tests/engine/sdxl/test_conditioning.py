"""Prompts -> conditioning against diffusers' StableDiffusionXLPipeline.encode_prompt, on
tiny random encoders (different widths) with the real CLIP vocabulary; long prompts,
emphasis, the cache and bad input."""

from __future__ import annotations

import logging
import os
import shutil

import numpy as np
import pytest
import torch
from diffusers import StableDiffusionXLPipeline

from conftest import pcc
from engine.errors import InputError, ModelFileError
from engine.sdxl import Conditioning, TextEncoders
from tiny_models import make_text_model
from tokenizer_files import PAD_TOKENS, reference_tokenizers, write_saved_tokenizer

# Single-token words, so a prompt of n words is n tokens in both tokenizers.
WORDS = ("cat dog red blue tree house sky sun moon star car road city river lake hill rock sand sea "
         "boat bird fish king queen girl boy man woman old new big small dark light gold green white").split()


def words(n: int, start: int = 0) -> str:
    return " ".join(WORDS[(start + i) % len(WORDS)] for i in range(n))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("sdxl-text")
    te1, te2 = make_text_model(root)
    tok1, tok2 = reference_tokenizers(root)
    pipe = StableDiffusionXLPipeline(vae=None, text_encoder=te1, text_encoder_2=te2, tokenizer=tok1,
                                     tokenizer_2=tok2, unet=None, scheduler=None, force_zeros_for_empty_prompt=True,
                                     add_watermarker=False)
    return root, pipe


@pytest.fixture(scope="module")
def encoders(tiny):
    with TextEncoders.load(tiny[0], cache=False) as te:
        yield te


def diffusers_encode(pipe, prompt, negative_prompt=None, clip_skip=None):
    with torch.no_grad():
        out = pipe.encode_prompt(prompt, device="cpu", do_classifier_free_guidance=True,
                                 negative_prompt=negative_prompt, clip_skip=clip_skip)
    return [t.numpy() for t in out]   # prompt_embeds, negative_prompt_embeds, pooled, negative_pooled


def as_list(c: Conditioning):
    return [c.prompt_embeds, c.negative_embeds, c.pooled, c.negative_pooled]


def test_words_are_single_tokens(encoders):
    for tok in encoders.tokenizers:
        assert len(tok.tokenize(words(len(WORDS)))) == len(WORDS)


@pytest.mark.parametrize("prompt,negative", [
    ("a photo of a cat", None),
    ("a photo of a cat", ""),
    ("a lighthouse at dusk, oil painting!!! (dramatic) [light]", "blurry, ugly!, low quality"),
    ("Ünïcödé café 😀🎨, 1990s polaroid; 3.14", "text, watermark"),
    ("", "something"),
    (words(75), words(20)),                 # exactly 75 tokens: one chunk (OnnxStream fails here)
    (words(90), None),                      # diffusers truncates to 75: compared on the first chunk below
])
def test_conditioning_matches_diffusers_encode_prompt(tiny, encoders, prompt, negative):
    _, pipe = tiny
    expected = diffusers_encode(pipe, prompt, negative)
    got = as_list(encoders.encode(prompt, negative, emphasis=False))
    if len(prompt.split()) > 75:
        got[0], got[1] = got[0][:, :77], got[1][:, :77]
    for name, g, e in zip(["prompt_embeds", "negative_embeds", "pooled", "negative_pooled"], got, expected):
        assert g.shape == e.shape and g.dtype == np.float32, name
        if negative is None and name.startswith("negative"):
            assert not g.any(), name                      # force_zeros_for_empty_prompt
        else:
            assert pcc(g, e) >= 0.9999, name
            assert np.abs(g - e).max() < 1e-4, name


def test_shapes_fit_the_unet(encoders):
    c = encoders.encode("a cat")
    assert c.prompt_embeds.shape == (1, 77, 96) and c.pooled.shape == (1, 64)   # 32 + 64 wide, pooled 64
    assert c.chunks == 1


def test_clip_skip_matches_diffusers_for_the_prompt_and_applies_to_the_negative_too(tiny, encoders):
    _, pipe = tiny
    expected = diffusers_encode(pipe, "a photo of a cat", "blurry", clip_skip=1)
    c = encoders.encode("a photo of a cat", "blurry", emphasis=False, clip_skip=1)
    assert pcc(c.prompt_embeds, expected[0]) >= 0.9999
    assert pcc(c.pooled, expected[2]) >= 0.9999 and pcc(c.negative_pooled, expected[3]) >= 0.9999
    ids = [tok("blurry", padding="max_length", max_length=77, return_tensors="pt").input_ids
           for tok in (pipe.tokenizer, pipe.tokenizer_2)]
    with torch.no_grad():
        states = [enc(i, output_hidden_states=True).hidden_states[-3]
                  for enc, i in zip((pipe.text_encoder, pipe.text_encoder_2), ids)]
    assert pcc(c.negative_embeds, torch.cat(states, dim=-1).numpy()) >= 0.9999
    with pytest.raises(InputError, match="clip_skip"):
        encoders.encode("a cat", clip_skip=2)


def test_long_prompt_is_chunked_and_each_chunk_encoded_on_its_own(encoders):
    long = encoders.encode(words(150), emphasis=False)
    first = encoders.encode(words(75), emphasis=False)
    second = encoders.encode(words(75, start=75), emphasis=False)
    assert long.prompt_embeds.shape == (1, 154, 96) and long.negative_embeds.shape == (1, 154, 96)
    assert not long.negative_embeds.any()
    assert np.allclose(long.prompt_embeds[:, :77], first.prompt_embeds, atol=1e-5)
    assert np.allclose(long.prompt_embeds[:, 77:], second.prompt_embeds, atol=1e-5)
    assert np.allclose(long.pooled, first.pooled, atol=1e-5)                 # pooled from the first chunk


def test_76_tokens_take_two_chunks(encoders):
    assert encoders.encode(words(76)).prompt_embeds.shape == (1, 154, 96)


def test_negative_is_padded_to_the_prompts_chunks_and_the_prompt_to_the_negatives(encoders):
    empty = encoders.encode("", "").prompt_embeds
    short = encoders.encode("blurry", "").prompt_embeds
    c = encoders.encode(words(100), "blurry")
    assert c.negative_embeds.shape == (1, 154, 96)
    assert np.allclose(c.negative_embeds[:, :77], short, atol=1e-5)
    assert np.allclose(c.negative_embeds[:, 77:], empty, atol=1e-5)          # an empty chunk: BOS EOS padding
    c = encoders.encode("blurry", words(100))
    assert c.prompt_embeds.shape == c.negative_embeds.shape == (1, 154, 96)
    assert np.allclose(c.prompt_embeds[:, 77:], empty, atol=1e-5)


def test_over_225_tokens_are_truncated_and_the_dropped_words_logged(encoders, caplog):
    with caplog.at_level(logging.WARNING):
        c = encoders.encode(words(225) + " zebra giraffe", emphasis=False)
    assert c.prompt_embeds.shape == (1, 231, 96)
    assert "prompt is 227 tokens long" in caplog.text and "'zebra giraffe'" in caplog.text
    assert np.allclose(c.prompt_embeds, encoders.encode(words(225), emphasis=False).prompt_embeds, atol=1e-5)


def test_exclamation_marks_count_per_tokenizer_and_the_chunks_still_line_up(encoders):
    text = "wow" + "!" * 100                   # tokenizer_2 reads 101 tokens, tokenizer a handful
    assert len(encoders.tokenizers[0].tokenize(text)) < 75 < len(encoders.tokenizers[1].tokenize(text))
    c = encoders.encode(text)
    assert c.prompt_embeds.shape == (1, 154, 96)


def test_emphasis_changes_exactly_the_weighted_tokens(encoders):
    plain = encoders.encode("a photo of a cat on a mat", emphasis=False)
    weighted = encoders.encode("a photo of a (cat:1.5) on [a mat]")
    assert np.array_equal(weighted.pooled, plain.pooled)
    for cols in (slice(0, 32), slice(32, 96)):             # each encoder's part, scaled on its own
        ratio = weighted.prompt_embeds[0, :, cols] / plain.prompt_embeds[0, :, cols]
        factors = np.ones(77)
        factors[5] = 1.5                                    # BOS a photo of a [cat] on [a mat]
        factors[7:9] = 1 / 1.1
        common = ratio[0, 0]
        assert np.allclose(ratio, common * factors[:, None], rtol=1e-4), cols
        assert abs(common - 1) > 1e-4                       # the mean was restored, by one common factor


def test_emphasis_without_brackets_is_bit_identical_to_plain(encoders):
    a = encoders.encode("a photo of a cat, at night: 8k", "ugly")
    b = encoders.encode("a photo of a cat, at night: 8k", "ugly", emphasis=False)
    for x, y in zip(as_list(a), as_list(b)):
        assert np.array_equal(x, y)


def test_emphasis_off_reads_brackets_literally(tiny, encoders):
    _, pipe = tiny
    expected = diffusers_encode(pipe, "a (cat:1.5) \\(x\\)")
    got = encoders.encode("a (cat:1.5) \\(x\\)", emphasis=False)
    assert pcc(got.prompt_embeds, expected[0]) >= 0.9999
    assert not np.allclose(got.prompt_embeds, encoders.encode("a (cat:1.5) \\(x\\)").prompt_embeds, atol=1e-3)


def test_empty_whitespace_control_characters_and_bad_utf8_are_handled(encoders, caplog):
    empty = encoders.encode("")
    assert np.array_equal(encoders.encode("   \n\t ").prompt_embeds, empty.prompt_embeds)
    with caplog.at_level(logging.WARNING):
        ctrl = encoders.encode("a\x00cat\x1b[0m")
        assert "control character" in caplog.text
        raw = encoders.encode(b"caf\xff cat")
        assert "invalid UTF-8" in caplog.text
        unbalanced = encoders.encode("a (cat", emphasis=True)
        assert "unbalanced bracket" in caplog.text
    assert np.array_equal(ctrl.prompt_embeds, encoders.encode("a cat [0m").prompt_embeds)
    assert np.array_equal(raw.prompt_embeds, encoders.encode("caf\ufffd cat").prompt_embeds)
    assert np.array_equal(unbalanced.prompt_embeds, encoders.encode("a (cat", emphasis=False).prompt_embeds)
    with pytest.raises(InputError, match="prompt must be text"):
        encoders.encode(None)


@pytest.mark.parametrize("preset", ["rpi", "rpi-lowmem"])
def test_presets_give_the_default_result(tiny, encoders, preset):
    expected = encoders.encode(words(100), "blurry")
    with TextEncoders.load(tiny[0], preset=preset, cache=False) as te:
        got = te.encode(words(100), "blurry")
    for g, e in zip(as_list(got), as_list(expected)):
        assert pcc(g, e) >= 0.9999 and np.abs(g - e).max() < 1e-4


def test_cache_skips_the_encoders_for_a_repeated_job(tiny, tmp_path, monkeypatch):
    root = tiny[0]
    with TextEncoders.load(root, cache_dir=tmp_path) as te:
        first = te.encode("a cat (in a hat)", "blurry", clip_skip=1)
        assert len(list(tmp_path.glob("*.npz"))) == 1

    def fail(*args, **kwargs):
        raise AssertionError("the text encoders ran although the conditioning was cached")

    with TextEncoders.load(root, cache_dir=tmp_path) as te:
        monkeypatch.setattr(type(te.encoders[0]), "forward", fail)
        again = te.encode("a cat (in a hat)", "blurry", clip_skip=1)
        for x, y in zip(as_list(again), as_list(first)):
            assert np.array_equal(x, y)
        monkeypatch.undo()
        te.encode("a cat (in a hat)", "blurry")                 # clip_skip differs
        te.encode("a cat (in a hat)", None, clip_skip=1)         # negative differs
        te.encode("a cat (in a hat)", "blurry", clip_skip=1, emphasis=False)
    assert len(list(tmp_path.glob("*.npz"))) == 4


def test_cache_is_invalidated_by_changed_model_files_and_survives_corruption(tiny, tmp_path, caplog):
    model = tmp_path / "model"
    shutil.copytree(tiny[0], model)
    cache = tmp_path / "cache"
    with TextEncoders.load(model, cache_dir=cache) as te:
        te.encode("a cat")
        (entry,) = cache.glob("*.npz")
        entry.write_bytes(b"not an npz file")
        with caplog.at_level(logging.WARNING):
            c = te.encode("a cat")
        assert "unreadable cached conditioning" in caplog.text
        assert c.prompt_embeds.shape == (1, 77, 96)
    weights = model / "text_encoder_2" / "model.fp16.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    with TextEncoders.load(model, cache_dir=cache) as te:
        te.encode("a cat")
    assert len(list(cache.glob("*.npz"))) == 2


def test_standard_vocabulary_replaces_missing_tokenizer_folders(tiny, encoders, tmp_path):
    model = tmp_path / "model"
    for name in ("text_encoder", "text_encoder_2"):
        shutil.copytree(tiny[0] / name, model / name)
    with pytest.raises(ModelFileError, match=r"model/tokenizer: tokenizer file\(s\) missing"):
        TextEncoders.load(model, cache=False)
    with TextEncoders.load(model, standard_vocabulary=True, cache=False) as te:
        got = te.encode("a photo of a cat!! 😀", "blurry!")
    for g, e in zip(as_list(got), as_list(encoders.encode("a photo of a cat!! 😀", "blurry!"))):
        assert np.array_equal(g, e)


def test_tokenizer_folders_with_only_tokenizer_json_encode_as_diffusers(tiny, tmp_path):
    model = tmp_path / "model"
    for name in ("text_encoder", "text_encoder_2"):
        shutil.copytree(tiny[0] / name, model / name)
    for name, pad in PAD_TOKENS.items():
        write_saved_tokenizer(model / name, pad)
    with TextEncoders.load(model, cache=False) as te:
        got = te.encode("a photo of a cat!! 😀", "blurry!")
    for g, e in zip(as_list(got), diffusers_encode(tiny[1], "a photo of a cat!! 😀", "blurry!")):
        assert pcc(g, e) >= 0.99999


def test_missing_model_folders_are_named(tiny, tmp_path):
    with pytest.raises(ModelFileError, match="not a folder"):
        TextEncoders.load(tmp_path / "nowhere")
    model = tmp_path / "model"
    for name in ("tokenizer", "tokenizer_2", "text_encoder"):
        shutil.copytree(tiny[0] / name, model / name)
    with pytest.raises(ModelFileError, match=r"model/text_encoder_2: missing"):
        TextEncoders.load(model, cache=False)
    shutil.copytree(tiny[0] / "text_encoder", model / "text_encoder_2")
    with pytest.raises(ModelFileError, match="text_encoder_2: no text_projection"):
        TextEncoders.load(model, cache=False)


def test_break_encodes_each_part_as_its_own_chunk(encoders):
    both = encoders.encode(f"{words(3)} BREAK {words(4, 10)}", "blurry")
    first, second = encoders.encode(words(3), "blurry"), encoders.encode(words(4, 10), "blurry")
    assert both.chunks == 2
    same = dict(rtol=0, atol=1e-5)   # batches of different sizes round differently in BLAS
    np.testing.assert_allclose(both.prompt_embeds, np.concatenate([first.prompt_embeds, second.prompt_embeds], 1),
                               **same)
    np.testing.assert_allclose(both.pooled, first.pooled, **same)   # the first chunk's, as for any long prompt
    np.testing.assert_allclose(both.negative_embeds[:, :77], first.negative_embeds, **same)
