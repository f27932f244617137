"""The CLIP tokenizers against transformers' CLIPTokenizer, with the real vocabulary."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import CLIPTokenizer

from engine.errors import ModelFileError
from engine.sdxl.tokenizer import ClipTokenizer, sdxl_tokenizers
from tokenizer_files import write_saved_tokenizer, write_tokenizer

HANDWRITTEN = [
    "", " ", "   \t\n  ", "a photo of a cat", "A Photo Of A CAT", "a photo of a cat!", "hello!!! world!",
    "!!!", "!", "wow!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!", "yes! no? maybe...",
    "masterpiece, best quality, 8k, ultra-detailed, (sharp focus:1.2), [blurry]",
    "a lighthouse at dusk, oil painting by J. M. W. Turner, 1840", "3.14159 2,718 1e-5 -42 +7 100%",
    "a 1990s polaroid photo; grainy — faded colours", "don't it's we'll I'M they've you'd she's",
    "café crème brûlée, naïve façade, Ångström, smørrebrød, Straße", "ÉCOLE ÉLÉMENTAIRE À PARIS",
    "日本の山の風景、水彩画", "한국어 프롬프트 테스트", "Москва зимой, масляная живопись", "مدينة في الليل",
    "a cat 🐱 with a hat 🎩 and sunglasses 😎", "👨‍👩‍👧‍👦 family portrait", "🏳️‍🌈 flag, ❤️‍🔥 heart",
    "zero\u200bwidth\u200bspace", "tab\tseparated\tvalues", "line one\nline two\r\nline three",
    "<|startoftext|>a photo<|endoftext|>", "a <|ENDOFTEXT|> b", "x<|startoftext|>y", "A <|StartOfText|>",
    "emoji at end 🌅", "quotes \"double\" and 'single' and `back`", "brackets (a) [b] {c} <d>",
    "math: 2+2=4, 3*3=9, 10/2=5, x^2", "url https://example.com/path?q=1&r=2#frag", "email me@example.org",
    "#hashtag @mention $dollar €euro £pound ¥yen", "snake_case camelCase kebab-case PascalCase",
    "ALL CAPS SHOUTING!!!", "mixed123numbers456and789letters", "ﬁ ligature ﬀ and ℌ𝔢𝔩𝔩𝔬 fraktur",
    "e\u0301 combining accent vs é precomposed", "Ⅻ roman numeral ½ fraction ² superscript",
    "very " * 40 + "long", "word " * 74 + "end", "word " * 75, "word " * 76, "a, " * 120,
    "!!" * 60, "(((((((((deeply nested)))))))))", "\\(escaped\\) brackets", "semi;colons;everywhere;",
    "a photo of a cat, trending on artstation, unreal engine 5, octane render, 4k",
    "portrait of an old fisherman, weathered face, dramatic lighting, by Rembrandt and Vermeer",
    "ugly, blurry, low quality, deformed hands, extra fingers, watermark, text, signature",
]

WORDS = ["cat", "dog", "lighthouse", "sunset", "Portrait", "oil", "painting", "castle", "forest", "neon",
         "cyberpunk", "city", "rain", "misty", "mountains", "café", "naïve", "über", "Ölgemälde", "señor",
         "fjord", "Zürich", "москва", "東京", "🎨", "🌊", "🔥", "✨", "👾", "1024", "8k", "3d", "2.5", "xl"]
PUNCTUATION = [",", ".", "!", "!!", "!!!", "?", ";", ":", "-", "--", "...", "'s", "'", "\"", "(", ")", "[", "]",
               "/", "&", "+", "*", "#", "~"]


def generated_prompts(n: int, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    prompts = []
    for i in range(n):
        length = rng.choice([3, 8, 15, 30, 60, 120]) if i % 10 else rng.randint(150, 260)
        parts = []
        for _ in range(length):
            r = rng.random()
            parts.append(rng.choice(WORDS) if r < 0.6 else rng.choice(PUNCTUATION) if r < 0.9
                         else str(rng.randint(0, 99999)))
        sep = rng.choice([" ", "", "  "])
        prompts.append(sep.join(parts))
    return prompts


CORPUS = HANDWRITTEN + generated_prompts(200)


@pytest.fixture(scope="module", params=["legacy", "current", "saved"])
def folders(request, tmp_path_factory):
    """tokenizer/ and tokenizer_2/ as SDXL base ships them (legacy), with the configs newer
    transformers writes (current), and as the installed transformers saves them (saved:
    tokenizer.json only)."""
    root = tmp_path_factory.mktemp(f"tokenizers-{request.param}")
    for name, pad in (("tokenizer", "<|endoftext|>"), ("tokenizer_2", "!")):
        if request.param == "saved":
            write_saved_tokenizer(root / name, pad)
        else:
            write_tokenizer(root / name, pad, legacy_format=request.param == "legacy")
    return root


def test_corpus_is_large_and_varied():
    assert len(CORPUS) >= 200
    joined = "".join(CORPUS)
    assert any(ord(c) > 0x1F000 for c in joined) and "!!!" in joined and "é" in joined
    assert any(len(p.split()) > 120 for p in CORPUS)


@pytest.mark.parametrize("name", ["tokenizer", "tokenizer_2"])
def test_ids_match_transformers_on_the_corpus(folders, name):
    ref = CLIPTokenizer.from_pretrained(folders / name)
    ours = ClipTokenizer.from_folder(folders / name)
    expected = ref(CORPUS, padding="max_length", max_length=77, truncation=True).input_ids
    untruncated = ref(CORPUS, add_special_tokens=False).input_ids
    for text, want, want_all in zip(CORPUS, expected, untruncated):
        assert ours(text).tolist() == want, text
        assert ours.tokenize(text) == want_all, text
    assert (ours.bos_id, ours.eos_id, ours.pad_id) == (ref.bos_token_id, ref.eos_token_id, ref.pad_token_id)


@pytest.mark.parametrize("name,pad", [("tokenizer", "<|endoftext|>"), ("tokenizer_2", "!")])
def test_bundled_vocabulary_gives_the_same_ids_as_sdxl_base_folders(tmp_path, name, pad):
    # SDXL base's folders are the legacy format (the current one differs only in how a literal,
    # upper-case "<|ENDOFTEXT|>" in a prompt is read).
    write_tokenizer(tmp_path / name, pad, legacy_format=True)
    ref = CLIPTokenizer.from_pretrained(tmp_path / name)
    standard = ClipTokenizer.standard(pad)
    expected = ref(CORPUS, padding="max_length", max_length=77, truncation=True).input_ids
    for text, want in zip(CORPUS, expected):
        assert standard(text).tolist() == want, text


@pytest.mark.parametrize("source", ["folders", "saved", "bundled"])
def test_sdxl_pair_sharing_one_bpe_model_keeps_each_tokenizers_ids(tmp_path, source):
    for name, pad in (("tokenizer", "<|endoftext|>"), ("tokenizer_2", "!")):
        (write_saved_tokenizer if source == "saved" else write_tokenizer)(tmp_path / name, pad)
    pair = sdxl_tokenizers(None if source == "bundled" else tmp_path)
    for name, ours in zip(("tokenizer", "tokenizer_2"), pair):
        ref = CLIPTokenizer.from_pretrained(tmp_path / name)
        expected = ref(CORPUS, padding="max_length", max_length=77, truncation=True).input_ids
        for text, want in zip(CORPUS, expected):
            assert ours(text).tolist() == want, (name, text)


def test_known_ids_of_a_photo_of_a_cat():
    ids = ClipTokenizer.standard()("a photo of a cat")
    assert ids[:7].tolist() == [49406, 320, 1125, 539, 320, 2368, 49407]
    assert ids.shape == (77,) and ids.dtype == np.int64 and (ids[7:] == 49407).all()


def test_tokenizer_2_reads_every_exclamation_mark_as_its_pad_id_0():
    tok1, tok2 = ClipTokenizer.standard(), ClipTokenizer.standard("!")
    assert tok2.pad_id == 0
    assert tok2.tokenize("hi! yes!!") == [1883, 0, 1958, 0, 0]
    assert tok1.tokenize("hi! yes!!") == [1883, 256, 1958, 748]
    assert tok2("x")[3:].tolist() == [0] * 74


def test_wrap_and_decode():
    tok = ClipTokenizer.standard()
    ids = tok.tokenize("Hello, wörld!! 😀")
    assert tok.decode(ids) == "hello , wörld !! 😀"
    assert tok.wrap(ids)[:len(ids) + 2] == [49406, *ids, 49407]
    with pytest.raises(ValueError):
        tok.wrap([320] * 76)


def test_missing_tokenizer_files_name_the_folder(tmp_path):
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "tokenizer" / "vocab.json").write_text("{}")
    with pytest.raises(ModelFileError, match=r"tokenizer: tokenizer file\(s\) missing: merges.txt"):
        ClipTokenizer.from_folder(tmp_path / "tokenizer")
    with pytest.raises(ModelFileError, match="tokenizer_2: .*vocab.json, merges.txt.*standard_vocabulary"):
        ClipTokenizer.from_folder(tmp_path / "tokenizer_2")


def test_broken_tokenizer_files_are_reported(tmp_path):
    bad = tmp_path / "tokenizer"
    write_tokenizer(bad, "<|endoftext|>")
    (bad / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ModelFileError, match="tokenizer_config.json: not valid JSON"):
        ClipTokenizer.from_folder(bad)
    (bad / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 1e30}))
    with pytest.raises(ModelFileError, match="model_max_length"):
        ClipTokenizer.from_folder(bad)
    (bad / "tokenizer_config.json").unlink()
    (bad / "vocab.json").write_text(json.dumps({"a": 0, "b": 1}))
    with pytest.raises(ModelFileError, match=r"tokenizer: (cannot read|the vocabulary has no token)"):
        ClipTokenizer.from_folder(bad)


def test_broken_or_foreign_tokenizer_json_is_reported(tmp_path):
    folder = tmp_path / "tokenizer"
    write_saved_tokenizer(folder, "<|endoftext|>")
    saved = folder / "tokenizer.json"
    saved.write_text(saved.read_text()[:1000])
    with pytest.raises(ModelFileError, match=r"tokenizer/tokenizer.json: cannot read it .*copy it again"):
        ClipTokenizer.from_folder(folder)
    Tokenizer(WordLevel({"a": 0, "<|endoftext|>": 1}, unk_token="<|endoftext|>")).save(str(saved))
    with pytest.raises(ModelFileError, match=r"tokenizer.json: a WordLevel tokenizer; .* CLIP's BPE"):
        ClipTokenizer.from_folder(folder)


def test_tokenizer_json_takes_the_added_tokens_and_max_length_of_its_folder(tmp_path):
    folder = tmp_path / "tokenizer_2"
    write_saved_tokenizer(folder, "!")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps(dict(config, model_max_length=40)))
    ours = ClipTokenizer.from_folder(folder)
    assert (ours.pad_id, ours.max_length) == (0, 40)
    assert ours.tokenize("hi! yes!!") == [1883, 0, 1958, 0, 0]
