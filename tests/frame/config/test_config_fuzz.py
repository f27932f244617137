"""The config loader on mutated copies of config.example.yaml: problems with places, never a crash."""

from __future__ import annotations

import signal
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frame.config import ConfigError, Problem, check_config, load_config

EXAMPLE = (Path(__file__).resolve().parents[3] / "config.example.yaml").read_text()
LINES = [line for line in EXAMPLE.splitlines() if line.strip() and not line.lstrip().startswith("#")]

NASTY_VALUES = [
    "[a, b]", "{x: 1}", "[[[[[[]]]]]]", "*nowhere", "&loop [*loop]", '"\\uD800"', '"\\uD83D\\uDE00 sun"', '"\\0"',
    '"a\\x07b"', "1e999", "-1", ".nan", ".inf", "!!binary aGk=", "!!python/object/apply:os.system [ls]", "~", "",
    "0x1F", "yes", "2001-12-14", "12:30", "99:99", '"' + "x" * 20_000 + '"', "/dev/null", "/", ".", "..",
    "!!set {a, b}", "? complex key", "- item", "'unclosed", '"{unclosed|"', "__missing_list__", "{a|{b|c}",
    "[spectra6-7.3]", "{panel: auto}", "-0", "1_000", "+5", "0o17", "true", "null",
]
values = st.sampled_from(NASTY_VALUES) | st.text(max_size=40)
OPERATIONS = ["value"] * 5 + ["delete", "duplicate", "insert", "truncate", "indent"]
mutations = st.lists(st.tuples(st.sampled_from(OPERATIONS),
                               st.integers(min_value=0, max_value=10 ** 6), values), min_size=1, max_size=4)


def mutate(text_lines: list[str], steps: list[tuple[str, int, str]]) -> str:
    lines = list(text_lines)
    for op, where, value in steps:
        if not lines:
            break
        i = where % len(lines)
        if op == "value" and ":" in lines[i]:
            key = lines[i].split(":", 1)[0]
            lines[i] = f"{key}: {value}"
        elif op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "insert":
            lines.insert(i, value)
        elif op == "truncate":
            lines[i] = lines[i][: where % (len(lines[i]) + 1)]
        elif op == "indent":
            lines[i] = " " * (where % 5) + lines[i]
    return "\n".join(lines) + "\n"


class Hung(Exception):
    pass


@pytest.fixture
def alarm():
    """A hang detector, not a speed check: one case may take seconds, never a minute."""
    def hung(*_):
        raise Hung()
    old = signal.signal(signal.SIGALRM, hung)
    yield lambda: signal.alarm(60)
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=mutations)
def test_a_mutated_example_config_gives_placed_problems_or_a_config(tmp_path, alarm, steps):
    path = tmp_path / "slowframe.yaml"
    path.write_text(mutate(LINES, steps), encoding="utf-8", errors="surrogatepass")
    alarm()
    tracemalloc.start()
    try:
        problems = check_config(path)
        try:
            load_config(path)
        except ConfigError as exc:
            assert any(p.severity == "error" for p in exc.problems)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert all(isinstance(p, Problem) and p.line >= 1 and p.column >= 1 and p.message for p in problems)
    assert all(len(str(p)) < 2000 for p in problems), "a problem quoted a huge value"
    assert peak < 64 * 1024 * 1024


def test_the_example_config_itself_has_no_errors(tmp_path):
    path = tmp_path / "slowframe.yaml"
    path.write_text(EXAMPLE)
    assert not [p for p in check_config(path) if p.severity == "error"]
