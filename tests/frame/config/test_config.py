"""The config file: every kind of mistake reported at its line and column, defaults, search path."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import frame.config as config_module
from frame.cli import main
from frame.config import ConfigError, check_config, default_config, find_config, load_config

REPO = Path(__file__).resolve().parents[3]


def problems(tmp_path: Path, text: str, name: str = "frame.yaml") -> list[tuple[int, int, str, str]]:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return [(p.line, p.column, p.severity, p.message) for p in check_config(path)
            if not p.message.startswith("no themes:")]   # that warning has its own test


def only(found, severity="error"):
    matching = [p for p in found if p[2] == severity]
    assert len(matching) == 1, found
    return matching[0]


def test_the_example_config_passes():
    config = load_config(REPO / "config.example.yaml")
    assert [t.name for t in config.themes] == ["harbours", "still life", "mountains"]
    assert all(p.severity == "warning" for p in config.warnings)   # at most: the model folder is not here
    mountains = config.theme("mountains")
    assert (mountains.size, mountains.sampler, mountains.schedule, mountains.guidance) == (
        (1344, 768), "dpmpp_2m", "karras", 6.0)
    assert config.theme("still life").steps == 24 and config.theme("harbours").steps == 20
    assert config.theme("harbours").negative.startswith("text, watermark")


def test_config_check_cli_accepts_the_example(capsys):
    assert main(["config", "check", str(REPO / "config.example.yaml")]) == 0
    assert "0 error(s)" in capsys.readouterr().out


def test_unknown_keys_name_the_closest_valid_one(tmp_path):
    found = problems(tmp_path, """\
        modle:
          path: /x
        themes:
          - name: sea
            prompt: the sea
            stpes: 20
        """)
    assert (1, 1, "error", "the config: unknown key 'modle'; did you mean 'model'?") in found
    assert (6, 5, "error", "themes[0]: unknown key 'stpes'; did you mean 'steps'?") in found


def test_wrong_types_say_what_is_expected(tmp_path):
    found = problems(tmp_path, """\
        themes:
          - name: sea
            prompt: the sea
            steps: many
            guidance: [1, 2]
        buttons:
          enabled: maybe
        """)
    assert (4, 12, "error", "themes[0].steps: 'many' is not a whole number; use 1 to 150 steps") in found
    assert (5, 15, "error", "themes[0].guidance: expected a number, got a list") in found
    assert (7, 12, "error", "buttons.enabled: 'maybe' is not true or false") in found


@pytest.mark.parametrize("value, message", [
    ("-3", "themes[0].steps: -3 is out of range; use 1 to 150 steps"),
    ("0", "themes[0].steps: 0 is out of range; use 1 to 150 steps"),
    ("100000", "themes[0].steps: 100000 is out of range; use 1 to 150 steps"),
])
def test_negative_or_absurd_steps_are_errors(tmp_path, value, message):
    found = problems(tmp_path, f"""\
        themes:
          - name: sea
            prompt: the sea
            steps: {value}
        """)
    assert only(found) == (4, 12, "error", message)


def test_many_steps_are_a_warning_not_an_error(tmp_path):
    found = problems(tmp_path, """\
        themes:
          - {name: sea, prompt: the sea, steps: 80}
        """)
    line, column, severity, message = only(found, "warning")
    assert (line, severity) == (2, "warning") and "80 steps take many hours" in message
    assert not [p for p in found if p[2] == "error"]


def test_bad_times_and_quiet_hours(tmp_path):
    found = problems(tmp_path, """\
        schedule:
          times: ["07:00", "25:00", "7.30", 7:30]
          quiet_hours: ["22:00-07:00", "22:00", "10:00-10:00"]
        """)
    errors = [p for p in found if p[2] == "error"]
    assert errors == [
        (2, 20, "error", "schedule.times[1]: '25:00' is not a time; write HH:MM on a 24-hour clock, e.g. "
                         "\"07:00\" or \"19:30\""),
        (2, 29, "error", "schedule.times[2]: '7.30' is not a time; write HH:MM on a 24-hour clock, e.g. "
                         "\"07:00\" or \"19:30\""),
        (3, 32, "error", "schedule.quiet_hours[1]: '22:00' is not a range of times; write \"HH:MM-HH:MM\", "
                         "e.g. \"22:00-07:00\""),
        (3, 41, "error", "schedule.quiet_hours[2]: '10:00-10:00' starts and ends at the same time"),
    ]


def test_unquoted_times_are_read_as_times_not_yaml_sexagesimal_numbers(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text("schedule:\n  times: [7:30, 19:00]\n  quiet_hours: 22:00-06:30\n")
    schedule = load_config(path).schedule
    assert schedule.times == (dt.time(7, 30), dt.time(19, 0))
    assert str(schedule.quiet_hours[0]) == "22:00-06:30"


def test_a_time_inside_quiet_hours_is_a_warning(tmp_path):
    found = problems(tmp_path, """\
        schedule:
          times: ["23:00"]
          quiet_hours: ["22:00-07:00"]
        """)
    assert "falls in the quiet hours 22:00-07:00" in only(found, "warning")[3]


def test_unknown_panel_is_an_error_with_a_suggestion(tmp_path):
    found = problems(tmp_path, """\
        display:
          backend: file
          panel: spectra-7.3
        """)
    assert only(found) == (3, 10, "error", "display.panel: 'spectra-7.3' is not a panel; did you mean "
                                           "'spectra6-7.3'? (or \"auto\" to read the HAT's EEPROM; "
                                           "`slowframe panels` lists them)")


def test_display_values_are_checked_by_the_display_itself(tmp_path):
    found = problems(tmp_path, """\
        display:
          saturation: 3
          orientation: sideways
          palette: {white: [1, 2], pink: [1, 2, 3]}
          panel: spectra6-7.3
        """)
    errors = sorted(p[:2] + (p[3].split(":")[0].split(".white")[0],) for p in found)
    assert errors == [(2, 15, "display.saturation"), (3, 16, "display.orientation"), (4, 12, "display.palette")]


def test_the_file_backend_needs_a_panel_name(tmp_path):
    found = problems(tmp_path, "display:\n  backend: file\n")
    assert only(found)[:2] == (2, 12) and "name the panel" in only(found)[3]


def test_relative_paths_are_relative_to_the_config_file(tmp_path):
    (tmp_path / "models" / "sdxl").mkdir(parents=True)
    path = tmp_path / "frame.yaml"
    path.write_text("model: {path: models/sdxl}\ndisplay: {backend: file, panel: acep-7.3, output: shown}\n"
                    "themes: [{name: a, prompt: b}]\n")
    config = load_config(path)
    assert config.model.path == tmp_path / "models" / "sdxl"
    assert config.display.output == str(tmp_path / "shown")
    assert config.warnings == ()


def test_a_path_under_a_home_folder_is_expanded_and_one_of_no_user_is_an_error_at_its_place(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = tmp_path / "frame.yaml"
    path.write_text("model: {path: /nowhere}\ndisplay: {backend: file, panel: acep-7.3, output: ~/shown}\n"
                    "themes: [{name: a, prompt: b}]\n")
    assert load_config(path).display.output == str(tmp_path / "home" / "shown")
    nobody = "~no-such-user-slowframe"
    found = problems(tmp_path, f"model:\n  path: {nobody}/sdxl\ndisplay:\n  backend: file\n  panel: acep-7.3\n"
                               f"  output: {nobody}\nwildcards:\n  colour: {nobody} - red - blue\n")
    errors = [p for p in found if p[2] == "error"]
    assert [p[:2] for p in errors] == [(2, 9), (6, 11), (8, 11)], found
    for _, _, _, message in errors:
        assert "no-such-user-slowframe" in message and "home folder" in message and "whole path" in message


def test_a_missing_model_folder_is_only_a_warning(tmp_path):
    found = problems(tmp_path, "model:\n  path: /nowhere/sdxl\n  preset: rpi-lowmen\n")
    warning = only(found, "warning")
    assert warning[:2] == (2, 9) and "does not exist yet" in warning[3]
    assert only(found) == (3, 11, "error", "model.preset: 'rpi-lowmen' is not allowed; did you mean 'rpi-lowmem'?")


def test_the_decoder_is_a_model_setting(tmp_path):
    path = tmp_path / "frame.yaml"
    path.write_text("model: {path: /nowhere, decoder: tiny}\ndisplay: {backend: file, panel: acep-7.3, output: x}\n"
                    "themes: [{name: a, prompt: b}]\n")
    assert load_config(path).model.decoder == "tiny"
    assert load_config(REPO / "config.example.yaml").model.decoder == "full"
    found = problems(tmp_path, "model:\n  decoder: taesd\n")
    assert only(found) == (2, 12, "error", "model.decoder: 'taesd' is not allowed; allowed: full, tiny")


def test_theme_mistakes(tmp_path):
    found = problems(tmp_path, """\
        themes:
          - name: sea
            prompt: "a {calm|rough sea"
          - prompt: nameless
          - name: sea
            prompts: []
          - name: big
            prompt: x
            size: 1000x700
          - name: odd
            prompt: x
            size: 1000x704
          - name: both
            prompt: x
            prompts: [y]
        """)
    errors = [p for p in found if p[2] == "error"]
    assert errors == [
        (3, 16, "error", "themes[0].prompt: '{' is never closed: add the '}' that ends its alternatives"),
        (4, 5, "error", "themes[1]: missing 'name' (a short label shown in the status and history)"),
        (5, 11, "error", "themes[2].name: 'sea' is already the name of the theme on line 2; names must be unique"),
        (6, 14, "error", "themes[2].prompts: the list is empty; give at least one template"),
        (9, 11, "error", "themes[3].size: 1000x700 is not allowed; both sides must be multiples of 8 from 256 "
                         "to 2048"),
        (15, 14, "error", "themes[5]: give either 'prompt' or 'prompts', not both"),
    ]
    assert (12, 11, "warning", "themes[4].size: 1000x704: SDXL works best with multiples of 64 (e.g. 1024x704)") \
        in found


def test_samplers_and_schedules_are_read_as_the_engine_names_them(tmp_path):
    path = tmp_path / "frame.yaml"
    path.write_text(textwrap.dedent("""\
        defaults:
          sampler: DPM++ 2M Karras
        themes:
          - {name: a, prompt: x}
          - {name: b, prompt: x, sampler: dpm++3msde, schedule: Exponential}
          - {name: c, prompt: x, sampler: lcm, steps: 4}
          - {name: d, prompt: x, sampler: turbo, steps: 2}
        """))
    config = load_config(path)
    assert [(t.sampler, t.schedule) for t in config.themes] == [
        ("dpmpp_2m", "karras"), ("dpmpp_3m_sde", "exponential"), ("lcm", "karras"), ("euler_a", "trailing")]
    assert config.themes[3].recipe == "turbo" and config.themes[3].steps == 2
    deprecated, = config.warnings
    assert (deprecated.line, deprecated.column) == (7, 35) and "write recipe: turbo" in deprecated.message


def test_a_recipe_sets_the_sampling_unless_the_theme_does(tmp_path):
    lora = tmp_path / "sdxl_lightning_4step_lora.safetensors"
    lora.write_bytes(b"")
    path = tmp_path / "frame.yaml"
    path.write_text(textwrap.dedent(f"""\
        defaults:
          steps: 30
          guidance: 7
          lora: {lora}
        themes:
          - {{name: a, prompt: x}}
          - {{name: b, prompt: x, recipe: lightning-4}}
          - {{name: c, prompt: x, recipe: dmd2}}
          - {{name: d, prompt: x, recipe: lightning-4, sampler: euler_a, guidance: 1.5}}
          - {{name: e, prompt: x, recipe: TURBO, steps: 2}}
        """))
    got = [(t.recipe, t.sampler, t.schedule, t.steps, t.guidance) for t in load_config(path).themes]
    assert got == [("sdxl", "euler", "default", 30, 7.0), ("lightning-4", "euler", "trailing", 4, 0.0),
                   ("dmd2", "lcm", "explicit", 4, 0.0), ("lightning-4", "euler_a", "trailing", 4, 1.5),
                   ("turbo", "euler_a", "trailing", 2, 0.0)]


def test_bad_recipes_are_errors_at_their_place(tmp_path):
    found = problems(tmp_path, """\
        themes:
          - name: a
            prompt: x
            recipe: lightnin-4
          - name: b
            prompt: x
            recipe: lightning-4
          - name: c
            prompt: x
            recipe: turbo
            steps: 8
          - name: d
            prompt: x
            recipe: dmd2
            lora: style.safetensors
            steps: 2
        """)
    errors = [p for p in found if p[2] == "error"]
    assert [e[:2] for e in errors] == [(4, 13), (7, 13), (11, 12), (16, 12)]
    assert errors[0][3].startswith("themes[0].recipe: unknown recipe 'lightnin-4'; choose one of: lightning-4, ")
    assert errors[1][3].startswith("themes[1]: recipe lightning-4 is for SDXL-Lightning 4-step: it needs the LoRA "
                                   "sdxl_lightning_4step_lora.safetensors (ByteDance/SDXL-Lightning)")
    assert errors[2][3] == "themes[2]: recipe turbo supports 1-4 steps, not 8"
    assert errors[3][3].startswith("themes[3]: recipe dmd2 samples at timesteps 999,749,499,249, which are 4 steps")


def test_images_per_pass_beyond_the_preset_memory_is_an_error_at_its_place(tmp_path):
    found = problems(tmp_path, """\
        model: {preset: rpi-lowmem}
        themes:
          - {name: a, prompt: x, size: 512x512, images_per_pass: 3}
          - {name: b, prompt: x, size: 1024x1024, images_per_pass: 2}
          - {name: c, prompt: x, images_per_pass: 9}
        """)
    errors = [p for p in found if p[2] == "error"]
    assert [e[:2] for e in errors] == [(4, 60), (5, 43)]
    assert errors[0][3] == ("themes[1].images_per_pass: 2 pictures of 1024x1024 do not fit the rpi-lowmem "
                            "preset's memory; at most 1")
    path = tmp_path / "ok.yaml"
    path.write_text("model: {preset: default}\nthemes:\n  - {name: a, prompt: x, size: 1024x1024, "
                    "images_per_pass: 4}\n")
    assert load_config(path).themes[0].images_per_pass == 4


def test_bad_samplers_and_schedules_list_the_valid_ones_nearest_first(tmp_path):
    found = problems(tmp_path, """\
        themes:
          - name: a
            prompt: x
            sampler: dpmpp_2z
          - name: b
            prompt: x
            schedule: karas
          - name: c
            prompt: x
            sampler: lcm
            steps: 60
          - name: d
            prompt: x
            sampler: dpmpp_2m_karras
            schedule: exponential
        """)
    errors = [p for p in found if p[2] == "error"]
    assert [e[:2] for e in errors] == [(4, 14), (7, 15), (11, 12), (15, 15)]
    assert errors[0][3].startswith("themes[0].sampler: 'dpmpp_2z' is not a sampler; choose one of: dpmpp_2m, ")
    assert "turbo" in errors[0][3]
    assert errors[1][3].startswith("themes[1].schedule: 'karas' is not a schedule; choose one of: karras, ")
    assert "themes[2]: lcm and tcd take at most 50 steps on their own schedule, got 60" in errors[2][3]
    assert "themes[3]: sampler 'dpmpp_2m_karras' already names the karras schedule" in errors[3][3]


def test_an_empty_theme_list_is_an_error(tmp_path):
    assert only(problems(tmp_path, "themes: []\n"))[:2] == (1, 9)


def test_no_themes_key_uses_the_builtin_themes_with_a_warning(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text("order: sequential\n")
    config = load_config(path)
    assert [t.name for t in config.themes] == [t.name for t in default_config().themes]
    assert config.order == "sequential"
    assert "built-in themes" in config.warnings[0].message


def test_unknown_wildcards_point_at_the_reference(tmp_path):
    found = problems(tmp_path, """\
        themes:
          - name: sea
            prompt: "a __colr__ sea"
        wildcards:
          colour: [red, blue]
        """)
    line, column, _, message = only(found)
    assert (line, column) == (3, 16)
    assert message.startswith("unknown wildcard list __colr__; did you mean __colour__?")


def test_wildcard_files_and_the_wildcard_folder(tmp_path):
    (tmp_path / "lists").mkdir()
    (tmp_path / "lists" / "style.txt").write_text("# styles\n\nwoodcut\n  {gouache|ink} painting\n")
    (tmp_path / "moods.txt").write_text("calm\n__style__ mood\n")
    path = tmp_path / "f.yaml"
    path.write_text(textwrap.dedent("""\
        themes:
          - {name: sea, prompt: "a __mood__ sea, __style__"}
        wildcards:
          mood: moods.txt
        wildcard_folder: lists
        """))
    config = load_config(path)
    assert [t.source for t in config.wildcards["style"]] == ["woodcut", "{gouache|ink} painting"]
    assert [t.source for t in config.wildcards["mood"]] == ["calm", "__style__ mood"]
    assert set(config.watched_files) == {path, tmp_path / "moods.txt", tmp_path / "lists" / "style.txt"}


def test_mistakes_inside_wildcard_files_are_reported_in_that_file(tmp_path):
    (tmp_path / "style.txt").write_text("woodcut\n  {gouache|ink painting\n")
    path = tmp_path / "f.yaml"
    path.write_text("themes:\n  - {name: sea, prompt: a __style__ sea}\nwildcards:\n  style: style.txt\n"
                    "  missing: nothere.txt\n")
    found = check_config(path)
    errors = [(Path(p.file).name, p.line, p.column) for p in found if p.severity == "error"]
    assert errors == [("f.yaml", 5, 12), ("style.txt", 2, 3)]


def test_wildcard_cycles_are_errors(tmp_path):
    found = problems(tmp_path, """\
        themes:
          - {name: x, prompt: __a__}
        wildcards:
          a: [__b__]
          b: ["{__a__|c}"]
        """)
    assert "__a__ -> __b__ -> __a__" in only(found)[3]


def test_buttons_check_pins_actions_and_conflicts(tmp_path):
    found = problems(tmp_path, """\
        buttons:
          A: {pin: 17, press: skp}
          B: {pin: 24}
          E: {press: skip}
          F: {pin: 40, press: skip}
        """)
    errors = [p for p in found if p[2] == "error"]
    assert errors == [
        (2, 12, "error", "buttons.A.pin: GPIO 17 is the panel's BUSY line, used by the panel; pick a free pin"),
        (2, 23, "error", "buttons.A.press: 'skp' is not allowed; did you mean 'skip'?"),
        (3, 12, "error", "buttons.B: GPIO 24 is also button D's pin; each button needs its own"),
        (4, 6, "error", "buttons.E: missing 'pin' (the BCM GPIO number the button pulls to ground)"),
        (5, 12, "error", "buttons.F.pin: 40 is out of range; use 0 to 27 (BCM numbering)"),
    ]


def test_button_c_moves_to_gpio_25_on_the_large_panel(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text("buttons:\n  D: off\n  A: {hold: none}\n")
    buttons = load_config(path).buttons
    assert [b.name for b in buttons.buttons] == ["A", "B", "C"]
    assert buttons.pins_for("spectra6-13.3") == {"A": 5, "B": 6, "C": 25}
    assert buttons.pins_for("spectra6-7.3") == {"A": 5, "B": 6, "C": 16}
    assert buttons.buttons[0].hold == "none" and buttons.buttons[0].press == "previous"


def test_duplicate_keys_are_reported(tmp_path):
    found = problems(tmp_path, "order: shuffle\nno_repeat: 5\norder: weighted\n")
    assert only(found) == (3, 1, "error", "the config: 'order' is given twice (the first is on line 1); keep one")


def test_yaml_values_that_look_like_booleans_stay_text(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text("themes:\n  - {name: no, prompt: yes}\n")
    theme = load_config(path).themes[0]
    assert (theme.name, theme.templates[0].source) == ("no", "yes")


@pytest.mark.parametrize("content, line, column, words", [
    ("themes:\n  - name: a\n\tprompt: b\n", 3, 1, "replace the tab characters"),
    ("themes: [a, b\n", 2, 1, "not valid YAML"),
    ("order: 'shuffle\n", 2, 1, "not valid YAML"),
])
def test_broken_yaml_is_one_clear_problem(tmp_path, content, line, column, words):
    path = tmp_path / "f.yaml"
    path.write_text(content)
    [problem] = check_config(path)
    assert (problem.line, problem.column) == (line, column)
    assert words in problem.message


def test_files_that_are_not_text_are_reported(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_bytes(b"order: shuffle\nno_repeat: \xff\xfe\n")
    [problem] = check_config(path)
    assert (problem.line, problem.message) == (2, "the file is not UTF-8 text; save it as UTF-8")


def test_an_empty_file_means_all_defaults(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text("# nothing here yet\n")
    config = load_config(path)
    assert config.order == "shuffle" and config.no_repeat == 20 and config.themes


def test_search_path_order(tmp_path, monkeypatch):
    boot, etc = tmp_path / "boot.yaml", tmp_path / "etc.yaml"
    monkeypatch.setattr(config_module, "SEARCH_PATH", (boot, etc))
    assert find_config(None) is None
    etc.write_text("order: sequential\n")
    assert find_config(None) == etc
    boot.write_text("order: weighted\n")
    assert find_config(None) == boot
    explicit = tmp_path / "mine.yaml"
    with pytest.raises(ConfigError, match="no such config file"):
        find_config(explicit)
    explicit.write_text("")
    assert find_config(explicit) == explicit


def test_config_check_prints_every_problem_and_exits_1_without_a_traceback(tmp_path):
    path = tmp_path / "frame.yaml"
    path.write_text("modle: {}\nthemes:\n  - name: a\n    prompt: b\n    steps: -1\n")
    result = subprocess.run([sys.executable, "-m", "frame.cli", "config", "check", str(path)],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{path}:1:1: error: the config: unknown key 'modle'; did you mean 'model'?",
        f"{path}:5:12: error: themes[0].steps: -1 is out of range; use 1 to 150 steps",
    ]
    assert "Traceback" not in result.stderr and "2 error(s)" in result.stderr


@pytest.mark.parametrize("content", [None, "themes: [a, b\n", "\tbad: tab\n"])
def test_config_check_never_shows_a_traceback(tmp_path, capsys, content):
    path = tmp_path / "frame.yaml"
    if content is not None:
        path.write_text(content)
    status = main(["config", "check", str(path)])
    captured = capsys.readouterr()
    assert status == 1
    assert f"{path}:" in captured.out + captured.err
    assert "Traceback" not in captured.out + captured.err


def test_unquoted_prompts_that_yaml_misreads_get_a_quoting_hint(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text("themes:\n  - name: a\n    prompt: {misty|sunny} harbour\n")
    [problem] = check_config(path)
    assert problem.line == 3
    assert problem.message.endswith('must be in double quotes: prompt: "{misty|sunny} harbour")')


def test_lora_tags_name_files_in_the_lora_folder_or_are_errors_at_the_tag(tmp_path):
    (tmp_path / "loras").mkdir()
    (tmp_path / "loras" / "woodcut.safetensors").write_bytes(b"x")
    (tmp_path / "styles.txt").write_text("ink\n  etching <lora:etchng:0.7>\n")
    found = problems(tmp_path, """\
        model: {lora_folder: loras}
        themes:
          - name: sea
            prompt: "a boat <lora:woodcut:0.8>, <lora:wodcut:1> BREAK __style__"
          - name: hills
            prompt: "hills <hypernet:x:1>"
            negative: "blurry <lora:woodcut:1>"
        wildcards:
          style: styles.txt
        """)
    errors = [(line, column, message) for line, column, severity, message in found if severity == "error"]
    by_place = {(line, column): message for line, column, message in errors}
    assert set(by_place) == {(2, 11), (4, 41), (6, 20), (7, 23)}
    assert by_place[(2, 11)].startswith("no LoRA named 'etchng'")      # in styles.txt, line 2 column 11
    assert "no LoRA named 'wodcut'" in by_place[(4, 41)] and "did you mean 'woodcut'?" in by_place[(4, 41)]
    assert "LoRAs only" in by_place[(6, 20)]
    assert "go in the prompt, not in the negative prompt" in by_place[(7, 23)]
    assert [p for p in check_config(tmp_path / "frame.yaml") if p.line == 2][0].file == str(tmp_path / "styles.txt")


def test_a_theme_with_known_lora_tags_passes(tmp_path):
    (tmp_path / "loras").mkdir()
    (tmp_path / "loras" / "woodcut.safetensors").write_bytes(b"x")
    path = tmp_path / "frame.yaml"
    path.write_text('model: {lora_folder: loras}\nthemes: [{name: sea, prompt: "a boat <lora:woodcut:0.8>"}]\n')
    config = load_config(path)
    assert config.model.lora_folder == tmp_path / "loras"


def test_a1111_escaped_brackets_in_double_quotes_get_a_hint_and_work_in_single_quotes(tmp_path):
    [(line, column, _, message)] = problems(tmp_path, r"""
        themes:
          - {name: sea, prompt: "a \(big\) boat, (sea:1.2) [haze] BREAK at dusk"}
        """)
    assert (line, column) == (3, 29) and "unknown escape character '('" in message
    assert r"in single quotes: 'a \(big\) boat'" in message
    path = tmp_path / "single.yaml"
    path.write_text("themes:\n  - {name: sea, prompt: 'a \\(big\\) boat, (sea:1.2) [haze] BREAK at dusk'}\n")
    [template] = load_config(path).theme("sea").templates
    assert template.source == r"a \(big\) boat, (sea:1.2) [haze] BREAK at dusk"
