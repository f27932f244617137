"""`slowframe generate` loads only what generating needs: every module imported stays
resident through the UNet, on a 512 MB Pi."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from PIL import Image

import engine
from engine.errors import InputError
from frame.cli import build_parser, main, version
from frame.cli.generate import preset_from

CHILD = """
import sys
from frame.cli import main
rc = main(["generate", "--models-path", sys.argv[1], "--prompt", "a lighthouse"])
unneeded = sorted(m for m in sys.modules if m.split(".")[0] == "yaml" or m.startswith(("frame.display", "frame.config", "engine.convert")))
print(rc, unneeded)
"""


def test_generate_imports_no_display_theme_or_import_code_and_still_reports_user_errors(tmp_path):
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "missing")], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["1", "[]"]
    assert "no such model folder" in out.stderr and "Traceback" not in out.stderr


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory):
    from engine.sdxl.random_model import write_random_model

    return write_random_model(tmp_path_factory.mktemp("model") / "demo")


def generate(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["generate", "--prompt", "a lighthouse", "--seed", "3", "--width", "64", "--height", "64", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_running_a_finished_checkpointed_job_again_says_every_step_was_done(demo_model, tmp_path, capsys):
    args = ("--models-path", str(demo_model), "--steps", "2", "--checkpoint-dir", str(tmp_path / "run"),
            "--output", str(tmp_path / "a.png"))
    assert generate(capsys, *args)[0] == 0
    code, _, err = generate(capsys, *args)
    assert code == 0 and "None" not in err
    assert f"all 2 steps were done already in {tmp_path / 'run'}: only the VAE ran" in err


def test_progress_prints_each_step_once_when_guidance_takes_two_evaluations(demo_model, tmp_path, capsys):
    code, _, err = generate(capsys, "--models-path", str(demo_model), "--steps", "3", "--guidance", "5",
                            "--rpi-lowmem", "--output", str(tmp_path / "a.png"))   # rpi-lowmem: CFG as 2 halves
    assert code == 0
    steps = [line.split()[1] for line in err.splitlines() if line.startswith("step ")]
    assert steps == ["1/3", "2/3", "3/3"]


def test_a_checkpoint_folder_of_another_job_is_explained_with_the_command_line_flag(demo_model, tmp_path, capsys):
    common = ("--models-path", str(demo_model), "--checkpoint-dir", str(tmp_path / "run"),
              "--output", str(tmp_path / "a.png"))
    assert generate(capsys, *common, "--steps", "1")[0] == 0
    code, _, err = generate(capsys, *common, "--steps", "2")
    assert code == 1 and "steps: 1 there, 2 now" in err and "--restart" in err
    assert "restart=True" not in err and "Traceback" not in err


def test_onnxstream_command_lines_work(demo_model, tmp_path, capsys):
    out = tmp_path / "onnxstream.png"
    code, _, err = generate(capsys, "--xl", "--rpi-lowmem", "--embed-parameters", "--models-path", str(demo_model),
                            "--steps", "1", "--output", str(out))
    assert code == 0, err
    png = Image.open(out)
    assert "Steps: 1, Sampler: Euler" in png.text["parameters"]
    assert json.loads(png.text["slowframe"])["preset"] == "rpi-lowmem"


@pytest.mark.parametrize("flags,on_a_pi,preset", [
    ([], False, "default"), (["--rpi-lowmem"], False, "rpi-lowmem"), (["--rpi"], False, "rpi"),
    (["--rpi", "F"], False, "rpi"), (["--rpi", "force"], False, "rpi"), (["--rpi", "auto"], True, "rpi"),
    (["--rpi", "A"], False, "default"), (["--rpi", "disable"], True, "default"), (["--rpi", "D"], True, "default"),
    (["--preset", "rpi"], False, "rpi"),
])
def test_the_rpi_flags_choose_the_preset_as_onnxstream_does(flags, on_a_pi, preset, tmp_path):
    model_file = tmp_path / "model"
    model_file.write_bytes(b"Raspberry Pi Zero 2 W Rev 1.0\0" if on_a_pi else b"QEMU Virtual Machine\0")
    args = build_parser(only_generate=True).parse_args(["generate", "--models-path", "m", "--prompt", "p", *flags])
    assert preset_from(args, model_file) == preset


@pytest.mark.parametrize("flags,message", [
    (["--rpi-lowmem", "--preset", "rpi"], "give one of --preset and --rpi-lowmem"),
    (["--rpi", "maybe"], "--rpi maybe: use auto, force or disable"),
])
def test_rpi_flags_that_contradict_each_other_are_refused(flags, message):
    args = build_parser(only_generate=True).parse_args(["generate", "--models-path", "m", "--prompt", "p", *flags])
    with pytest.raises(InputError, match=message):
        preset_from(args)


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"slowframe {version()}"
    assert version() == engine.__version__


def test_a_lora_tag_in_the_prompt_applies_the_file_from_the_lora_folder(tiny_single_file, tmp_path, capsys):
    from lora_files import kohya_lora

    folder = tmp_path / "loras"
    folder.mkdir()
    kohya_lora(folder / "woodcut.safetensors")
    model = str(tiny_single_file.folder)
    out = tmp_path / "tagged.png"
    code, _, err = generate(capsys, "--models-path", model, "--steps", "1", "--output", str(out), "--lora-folder",
                            str(folder), "--prompt", "a lighthouse <lora:woodcut:0.7> BREAK at dusk")
    assert code == 0, err
    meta = json.loads(Image.open(out).text["slowframe"])
    assert meta["prompt"] == "a lighthouse BREAK at dusk"
    assert [entry[:2] for entry in meta["loras"]] == [["woodcut.safetensors", 0.7]]
    code, _, err = generate(capsys, "--models-path", model, "--lora-folder", str(folder),
                            "--prompt", "a lighthouse <lora:woodcat:1>")
    assert code == 1 and "--prompt: no LoRA named 'woodcat'" in err and "did you mean 'woodcut'?" in err
