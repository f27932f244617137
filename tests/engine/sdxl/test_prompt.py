"""Prompt parsing: emphasis syntax, cleaning of bad text, chunking and weighting."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from engine.errors import InputError
from engine.sdxl.prompt import (WeightedTokens, apply_weights, chunks_needed, clean_prompt,
                                limit_length, parse_emphasis, to_chunks, weighted_tokens)
from engine.sdxl.tokenizer import ClipTokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return ClipTokenizer.standard()


def weights_of(text: str) -> list[tuple[str, float]]:
    return [(s.text, round(s.weight, 6)) for s in parse_emphasis(text)]


@pytest.mark.parametrize("text,expected", [
    ("a cat", [("a cat", 1.0)]),
    ("a (cat) b", [("a ", 1.0), ("cat", 1.1), (" b", 1.0)]),
    ("((cat))", [("cat", 1.21)]),
    ("(((cat)))", [("cat", 1.331)]),
    ("[cat]", [("cat", round(1 / 1.1, 6))]),
    ("[[cat]]", [("cat", round(1 / 1.21, 6))]),
    ("(cat:1.3)", [("cat", 1.3)]),
    ("( cat : 0.5 )", [(" cat ", 0.5)]),
    ("(cat:-1)", [("cat", -1.0)]),
    ("((cat:2) hat)", [("cat", 2.2), (" hat", 1.1)]),
    ("(a [b] c)", [("a ", 1.1), ("b", 1.0), (" c", 1.1)]),
    ("(a:b)", [("a:b", 1.1)]),
    ("ratio 16:9, time 12:30", [("ratio 16:9, time 12:30", 1.0)]),
    (r"\(literal\) \[x\] back\\slash \q", [(r"(literal) [x] back\slash \q", 1.0)]),
    (r"(\(nested\))", [("(nested)", 1.1)]),
    ("()", []),
    ("", []),
])
def test_emphasis_syntax(text, expected):
    assert weights_of(text) == expected


@pytest.mark.parametrize("text,literal", [
    ("a (cat", "a (cat"),
    ("a cat)", "a cat)"),
    ("cat:1.5) dog", "cat:1.5) dog"),
    ("]x[", "]x["),
])
def test_unbalanced_brackets_are_literal_text_with_a_warning(text, literal, caplog):
    with caplog.at_level(logging.WARNING):
        assert weights_of(text) == [(literal, 1.0)]
    assert "unbalanced bracket" in caplog.text


def test_crossed_brackets_keep_the_pair_that_closes(caplog):
    with caplog.at_level(logging.WARNING):
        assert weights_of("(a [b) c]") == [("(a ", 1.0), ("b) c", round(1 / 1.1, 6))]
    assert "'(' ')'" in caplog.text


def test_clean_prompt_repairs_bad_text_and_says_so(caplog):
    assert clean_prompt("a cat") == "a cat"
    assert clean_prompt(b"caf\xc3\xa9") == "café"
    with caplog.at_level(logging.WARNING):
        assert clean_prompt(b"bad \xff\xfe bytes") == "bad \ufffd\ufffd bytes"
        assert "invalid UTF-8 at byte 4" in caplog.text
        assert clean_prompt("bell\x07 nul\x00 tab\t ok") == "bell  nul  tab\t ok"
        assert "U+0000, U+0007" in caplog.text
        assert clean_prompt("surrogate \udcff escape") == "surrogate \ufffd escape"
        assert clean_prompt("lone \ud800 surrogate") == "lone ? surrogate"
    assert clean_prompt("zwj 👨‍👩‍👧 emoji") == "zwj 👨‍👩‍👧 emoji"    # format characters are kept
    with pytest.raises(InputError, match="prompt must be text, got int"):
        clean_prompt(42)
    with pytest.raises(InputError, match="negative prompt must be text, got list"):
        clean_prompt(["a"], "negative prompt")


def test_weighted_tokens_give_each_token_its_segment_weight(tokenizer):
    tokens = weighted_tokens(tokenizer, parse_emphasis("a photo of a (cat:1.5) on [a mat]"))
    assert tokens.ids == tokenizer.tokenize("a photo of a cat on a mat")
    assert tokens.weights == pytest.approx([1, 1, 1, 1, 1.5, 1, 1 / 1.1, 1 / 1.1])


def test_chunks_of_75_wrapped_and_padded(tokenizer):
    ids = list(range(1000, 1160))           # 160 tokens: 3 chunks
    tokens = WeightedTokens(ids, [2.0] * 160)
    assert chunks_needed(tokenizer, tokens) == 3
    assert chunks_needed(tokenizer, WeightedTokens(ids[:75], [1.0] * 75)) == 1
    assert chunks_needed(tokenizer, WeightedTokens([], [])) == 1
    chunk_ids, weights = to_chunks(tokenizer, tokens, 4)
    assert chunk_ids.shape == weights.shape == (4, 77)
    assert chunk_ids[0].tolist() == [49406, *ids[:75], 49407]
    assert chunk_ids[1].tolist() == [49406, *ids[75:150], 49407]
    assert chunk_ids[2].tolist() == [49406, *ids[150:], 49407] + [49407] * 65
    assert chunk_ids[3].tolist() == [49406, 49407] + [49407] * 75
    assert (weights[:2, 1:76] == 2).all() and (weights[2, 1:11] == 2).all()
    assert (weights[:, 0] == 1).all() and (weights[2, 11:] == 1).all() and (weights[3] == 1).all()


def test_limit_length_keeps_three_chunks(tokenizer):
    tokens = WeightedTokens(list(range(300)), [1.0] * 300)
    kept, dropped = limit_length(tokenizer, tokens)
    assert kept.ids == list(range(225)) and dropped == list(range(225, 300))
    kept, dropped = limit_length(tokenizer, WeightedTokens([1] * 225, [1.0] * 225))
    assert len(kept.ids) == 225 and dropped == []


def test_apply_weights_scales_weighted_tokens_and_restores_the_mean():
    rng = np.random.default_rng(0)
    hidden = (rng.standard_normal((2, 77, 8)) + 0.5).astype(np.float32)
    weights = np.ones((2, 77), dtype=np.float32)
    weights[0, 5] = 1.5
    before = hidden.copy()
    apply_weights(hidden, weights)
    assert np.array_equal(hidden[1], before[1])                     # all-1 chunk untouched, bit for bit
    ratio = hidden[0] / before[0]
    common = ratio[0, 0]
    assert np.allclose(np.delete(ratio, 5, axis=0), common, rtol=1e-5)
    assert np.allclose(ratio[5], common * 1.5, rtol=1e-5)
    assert hidden[0].mean() == pytest.approx(before[0].mean(), rel=1e-5)


def a1111_chunks(pieces: list, bos: int, eos: int) -> list[list[int]]:
    """What A1111's tokenize_line makes of token runs and "BREAK"s (comma backtracking off): a chunk closes
    when full or at a BREAK, is padded with EOS to 75 tokens and wrapped BOS ... EOS; the end adds a chunk only
    when it has tokens or no chunk came before."""
    chunks, chunk = [], []

    def close():
        nonlocal chunk
        chunks.append([bos, *chunk, *[eos] * (75 - len(chunk)), eos])
        chunk = []

    for piece in pieces:
        if piece == "BREAK":
            close()
            continue
        for token in piece:
            if len(chunk) == 75:
                close()
            chunk.append(token)
    if chunk or not chunks:
        close()
    return chunks


WORDS = "cat dog red blue tree house sky sun moon star car road city river lake hill rock sand sea boat".split()


@pytest.mark.parametrize("seed", range(60))
def test_break_cuts_chunks_as_a1111_does(tokenizer, seed):
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(rng.integers(1, 6)):
        if rng.random() < 0.4:
            texts.append("BREAK")
        else:   # runs of 0-90 words, so chunks fill up exactly, overflow, or stay short
            length = int(rng.choice([0, 1, 5, 74, 75, 76, 90]))
            texts.append(" ".join(rng.choice(WORDS, length)))
    texts = [t for t in texts if t]
    pieces = [t if t == "BREAK" else tokenizer.tokenize(t) for t in texts]
    expected = a1111_chunks(pieces, tokenizer.bos_id, tokenizer.eos_id)
    tokens = weighted_tokens(tokenizer, parse_emphasis(" ".join(texts)))
    assert chunks_needed(tokenizer, tokens) == len(expected)
    ids, weights = to_chunks(tokenizer, tokens, len(expected))
    assert ids.tolist() == expected
    kept, dropped = limit_length(tokenizer, tokens)
    assert to_chunks(tokenizer, kept, min(3, len(expected)))[0].tolist() == expected[:3]
    assert dropped == [i for chunk in expected[3:] for i in chunk[1:76] if i != tokenizer.eos_id]


@pytest.mark.parametrize("text,chunks", [
    ("a cat BREAK a dog", [["a", "cat"], ["a", "dog"]]),
    ("BREAK a dog", [[], ["a", "dog"]]),
    ("a cat BREAK", [["a", "cat"]]),
    ("a cat BREAK BREAK a dog", [["a", "cat"], [], ["a", "dog"]]),
    ("a cat break a BREAKFAST", [["a", "cat", "break", "a", "breakfast"]]),   # a word, not the keyword
    ("(a cat BREAK a dog:1.3) BREAK\\(x\\)", [["a", "cat"], ["a", "dog"], ["(", "x", ")"]]),
])
def test_break_is_the_capital_word_anywhere_in_the_prompt(tokenizer, text, chunks):
    tokens = weighted_tokens(tokenizer, parse_emphasis(text))
    ids, _ = to_chunks(tokenizer, tokens, chunks_needed(tokenizer, tokens))
    assert [tokenizer.decode(list(row)).split() for row in ids] == chunks


def test_weights_stay_with_their_tokens_across_a_break(tokenizer):
    tokens = weighted_tokens(tokenizer, parse_emphasis("(a cat BREAK a dog:1.3) sea"))
    _, weights = to_chunks(tokenizer, tokens, 2)
    assert weights[0, 1:3].tolist() == pytest.approx([1.3, 1.3]) and weights[0, 3] == 1
    assert weights[1, 1:4].tolist() == pytest.approx([1.3, 1.3, 1.0])
