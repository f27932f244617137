"""`slowframe models download`: a hub-shaped local server (tests/hub_server.py) stands in for the
Hugging Face hub; downloads resume, refuse or re-fetch damaged files, and import to the same
model folder as `models import` of the same files. Nothing here reaches the internet."""

from __future__ import annotations

import json
import shutil
import struct

import pytest

from engine.convert import fetch as fetch_module
from engine.convert.download import download_folder, download_model
from engine.convert.fetch import Remote, fetch
from engine.convert.importer import import_model
from engine.convert.layout import COMPONENTS, weight_file
from engine.errors import EngineError, ModelFileError, NetworkError, StorageError
from frame.cli import main
from hub_server import HubServer
from small_disk import small_disk

UNET_FP16 = "diffusion_pytorch_model.fp16.safetensors"


def quiet(*_) -> None:
    pass


def no_sleep(_: float) -> None:
    pass


@pytest.fixture(scope="module")
def reference(tiny_single_file, tmp_path_factory):
    """The model folders `models import` makes from the diffusers folder and from the single file."""
    root = tmp_path_factory.mktemp("reference")
    import_model(tiny_single_file.folder, root / "diffusers", log=quiet)
    import_model(tiny_single_file.sgm, root / "single", log=quiet)
    return root


@pytest.fixture
def hub(tiny_single_file, tmp_path, monkeypatch):
    """A repository "acme/tiny-xl" as the hub ships them: the UNet as an .fp16 variant (a decoy full-precision
    file beside it), a single-file checkpoint and a pickle that a diffusers download must leave alone; and the
    single file at "acme/tiny-single" and at a plain link."""
    repo = tmp_path / "repo"
    shutil.copytree(tiny_single_file.folder, repo)
    (repo / "unet" / "diffusion_pytorch_model.safetensors").rename(repo / "unet" / UNET_FP16)
    (repo / "unet" / "diffusion_pytorch_model.safetensors").write_bytes(b"decoy: never fetched")
    (repo / "unet" / "diffusion_pytorch_model.bin").write_bytes(b"pickle: never fetched")
    shutil.copyfile(tiny_single_file.sgm, repo / "tiny_xl_checkpoint.safetensors")
    single = tmp_path / "single-repo"
    single.mkdir()
    shutil.copyfile(tiny_single_file.sgm, single / "tiny_xl.safetensors")
    (single / "README.md").write_text("a model card\n")
    server = HubServer()
    server.repos = {"acme/tiny-xl": repo, "acme/tiny-single": single}
    server.files = {"tiny_xl.safetensors": tiny_single_file.sgm}
    with server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        yield server


def same_weights(a, b) -> None:
    for component in COMPONENTS:
        assert (a / weight_file(component)).read_bytes() == (b / weight_file(component)).read_bytes(), component


def test_a_diffusers_repository_downloads_and_imports_as_models_import_does(hub, reference, tmp_path):
    (tmp_path / "models").mkdir()
    report = download_model("acme/tiny-xl", None, tmp_path / "models", log=quiet)
    dest = tmp_path / "models" / "tiny-xl"
    assert report.dest == dest
    same_weights(dest, reference / "diffusers")
    assert not download_folder(dest).exists()
    assert report.checked == {"sha256": 4, "git sha1": report.files - 4}
    assert report.peak_disk == report.bytes + report.imported.bytes_out
    fetched = {path.rpartition("/")[2] for path, _ in hub.requests if not path.startswith("/api/")}
    assert UNET_FP16 in fetched
    assert not {"diffusion_pytorch_model.bin", "tiny_xl_checkpoint.safetensors"} & fetched
    assert not [path for path, _ in hub.requests if path.endswith("unet/diffusion_pytorch_model.safetensors")]
    manifest = json.loads((dest / "slowframe-model.json").read_text())
    assert manifest["source"]["path"].endswith("tiny-xl")


@pytest.mark.parametrize("spec", ["acme/tiny-single/tiny_xl.safetensors", "{hub}/acme/tiny-single",
                                  "{hub}/acme/tiny-single/blob/main/tiny_xl.safetensors",
                                  "{plain}/files/tiny_xl.safetensors"])
def test_a_single_file_model_downloads_and_imports_as_models_import_does(hub, reference, tmp_path, spec):
    report = download_model(spec.format(hub=hub.url, plain=hub.plain_url), tmp_path / "tiny", tmp_path, log=quiet)
    same_weights(tmp_path / "tiny", reference / "single")
    # the tree API's LFS sha256 or the hub's X-Linked-Etag; a plain link's size from its Content-Range
    assert report.checked == ({"size": 1} if "files/" in spec else {"sha256": 1})
    assert hub.downloads("tiny_xl.safetensors")[0] == "bytes=0-7"   # the header is checked before the rest comes


def test_an_interrupted_download_resumes_where_it_stopped(hub, reference, tmp_path):
    size = (hub.repos["acme/tiny-xl"] / "unet" / UNET_FP16).stat().st_size
    hub.cut[UNET_FP16] = size // 3
    with pytest.raises(NetworkError, match="run the same command again to resume"):
        download_model("acme/tiny-xl", tmp_path / "tiny", tmp_path, log=quiet, retries=0)
    part = download_folder(tmp_path / "tiny") / "tiny-xl" / "unet" / (UNET_FP16 + ".part")
    assert part.stat().st_size == size // 3
    report = download_model("acme/tiny-xl", tmp_path / "tiny", tmp_path, log=quiet)
    assert hub.downloads(UNET_FP16)[-1] == f"bytes={size // 3}-"
    assert report.resumed >= size // 3 and report.received < report.bytes
    same_weights(tmp_path / "tiny", reference / "diffusers")


def test_a_dropped_connection_is_resumed_within_the_run(hub, reference, tmp_path):
    hub.cut["tiny_xl.safetensors"] = 1000
    lines = []
    download_model(f"{hub.plain_url}/files/tiny_xl.safetensors", tmp_path / "tiny", tmp_path, log=lines.append,
                   sleep=no_sleep)
    assert hub.downloads("tiny_xl.safetensors")[-1] == "bytes=1000-", hub.requests
    assert any("connection lost at" in line for line in lines)
    same_weights(tmp_path / "tiny", reference / "single")


def test_after_a_power_cut_only_the_durable_bytes_are_kept(hub, tmp_path, tiny_single_file):
    """Bytes past the last fsync may be garbage after a power cut: the progress record decides."""
    data = tiny_single_file.sgm.read_bytes()
    remote = Remote(f"{hub.plain_url}/files/tiny_xl.safetensors", len(data), fetch_module.hashlib.sha256(data).hexdigest())
    dest = tmp_path / "x.safetensors"
    (tmp_path / "x.safetensors.part").write_bytes(data[:5000] + b"\0" * 3000)
    (tmp_path / "x.safetensors.part.json").write_text(json.dumps(
        {"url": remote.url, "size": remote.size, "sha256": remote.sha256, "git_sha1": None, "durable_bytes": 5000}))
    got = fetch(remote, dest, log=quiet)
    assert hub.downloads("tiny_xl.safetensors") == ["bytes=5000-"]
    assert dest.read_bytes() == data and got.resumed_from == 5000
    assert not (tmp_path / "x.safetensors.part").exists() and not (tmp_path / "x.safetensors.part.json").exists()


def test_a_part_of_another_revision_is_not_resumed(hub, tmp_path, tiny_single_file):
    data = tiny_single_file.sgm.read_bytes()
    remote = Remote(f"{hub.plain_url}/files/tiny_xl.safetensors", len(data), fetch_module.hashlib.sha256(data).hexdigest())
    (tmp_path / "x.safetensors.part").write_bytes(b"old revision")
    (tmp_path / "x.safetensors.part.json").write_text(json.dumps(
        {"url": remote.url, "size": 12, "sha256": "0" * 64, "git_sha1": None, "durable_bytes": 12}))
    fetch(remote, tmp_path / "x.safetensors", log=quiet)
    assert hub.downloads("tiny_xl.safetensors") == [None]
    assert (tmp_path / "x.safetensors").read_bytes() == data


def test_a_corrupted_file_is_fetched_again(hub, reference, tmp_path):
    hub.corrupt[UNET_FP16] = 1
    lines = []
    download_model("acme/tiny-xl", tmp_path / "tiny", tmp_path, log=lines.append)
    assert any(UNET_FP16 in line and "sha256" in line and "fetching it again" in line for line in lines)
    assert hub.downloads(UNET_FP16) == [None, None]
    same_weights(tmp_path / "tiny", reference / "diffusers")


def test_a_file_corrupted_every_time_is_refused_and_not_kept(hub, tmp_path):
    hub.corrupt["config.json"] = 99
    with pytest.raises(ModelFileError, match="git blob id .* twice in a row"):
        download_model("acme/tiny-xl", tmp_path / "tiny", tmp_path, log=quiet)
    assert not list(download_folder(tmp_path / "tiny").rglob("*.part"))
    assert not (tmp_path / "tiny").exists()


def test_a_server_that_ignores_range_restarts_the_file(hub, reference, tmp_path):
    hub.cut["tiny_xl.safetensors"] = 1000
    hub.ignore_range = True
    report = download_model("acme/tiny-single/tiny_xl.safetensors", tmp_path / "tiny", tmp_path, log=quiet,
                            sleep=no_sleep)
    assert hub.downloads("tiny_xl.safetensors")[-2:] == [None, "bytes=1000-"]
    assert report.checked == {"sha256": 1}
    same_weights(tmp_path / "tiny", reference / "single")


@pytest.mark.parametrize("spec, message", [
    ("acme/no-such-model", "not found \\(HTTP 404\\)"),
    ("acme/tiny-xl/missing.safetensors", "acme/tiny-xl: no file missing.safetensors at revision main"),
    ("{plain}/files/nothing.safetensors", "not found \\(HTTP 404\\)"),
    ("{plain}/files/model.ckpt", "pickle file; slowframe reads only .safetensors"),
    ("not a repo", "expected a Hugging Face repository"),
])
def test_bad_names_are_clear_errors(hub, tmp_path, spec, message):
    with pytest.raises(EngineError, match=message):
        download_model(spec.format(hub=hub.url, plain=hub.plain_url), tmp_path / "x", tmp_path, log=quiet)
    assert not (tmp_path / "x").exists()


def test_no_network_is_a_clear_error(tmp_path, monkeypatch):
    server = HubServer()
    with server:
        url = server.url
    monkeypatch.setenv("HF_ENDPOINT", url)          # nothing listens there any more
    with pytest.raises(NetworkError, match="cannot reach the server .* Check the frame's network"):
        download_model("acme/tiny-xl", tmp_path / "x", tmp_path, log=quiet)


def test_a_repository_that_is_not_sdxl_is_refused_before_any_weights(hub, tmp_path):
    index = hub.repos["acme/tiny-xl"] / "model_index.json"
    index.write_text(json.dumps(dict(json.loads(index.read_text()), _class_name="StableDiffusionPipeline")))
    with pytest.raises(ModelFileError, match="this is a StableDiffusionPipeline model; slowframe runs SDXL"):
        download_model("acme/tiny-xl", tmp_path / "x", tmp_path, log=quiet)
    assert not [p for p, _ in hub.requests if p.endswith(".safetensors")]


def test_a_single_file_that_is_not_sdxl_is_refused_after_its_header(hub, tmp_path):
    header = json.dumps({"cond_stage_model.transformer.x": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}})
    sd1 = tmp_path / "sd15.safetensors"
    sd1.write_bytes(struct.pack("<Q", len(header)) + header.encode() + b"\0" * 4 + b"\0" * 10_000)
    html = tmp_path / "login.safetensors"
    html.write_bytes(b"<!DOCTYPE html><html>please log in</html>")
    hub.files.update({sd1.name: sd1, html.name: html})
    with pytest.raises(ModelFileError, match="Stable Diffusion 1.x"):
        download_model(f"{hub.plain_url}/files/sd15.safetensors", tmp_path / "x", tmp_path, log=quiet)
    assert [r for r in hub.downloads("sd15.safetensors")] == ["bytes=0-7", f"bytes=8-{8 + len(header) - 1}"]
    with pytest.raises(ModelFileError, match="not a .safetensors file"):
        download_model(f"{hub.plain_url}/files/login.safetensors", tmp_path / "x", tmp_path, log=quiet)


def test_a_download_that_cannot_fit_is_refused_up_front(hub, tmp_path):
    with small_disk(tmp_path / "card", "8m") as mounted:      # room for the configs and tokenizers only
        if not mounted:
            pytest.skip("needs root to mount a small tmpfs")
        with pytest.raises(StorageError, match="the download needs .* GB more but only .* GB is free"):
            download_model("acme/tiny-xl", tmp_path / "card" / "tiny", tmp_path, log=quiet)


def test_a_full_card_mid_download_is_a_clear_error(hub, tmp_path, tiny_single_file):
    with small_disk(tmp_path / "card", "64k") as mounted:
        if not mounted:
            pytest.skip("needs root to mount a small tmpfs")
        remote = Remote(f"{hub.plain_url}/files/tiny_xl.safetensors")   # a plain link without a listed size
        with pytest.raises(StorageError, match="the card is full after .* Free some space and run the same"):
            fetch(remote, tmp_path / "card" / "x.safetensors", log=quiet)


def test_the_command_line_downloads_and_reports(hub, tmp_path, capsys):
    downloads = ["--download-dir", str(tmp_path / "downloads")]
    assert main(["models", "download", "acme/tiny-single/tiny_xl.safetensors", str(tmp_path / "tiny"), *downloads]) == 0
    out = capsys.readouterr().out
    assert "1 by sha256" in out and f"use it with model.path: {tmp_path / 'tiny'}" in out
    assert main(["models", "download", "acme/nothing", str(tmp_path / "other"), *downloads]) == 1
    err = capsys.readouterr().err
    assert err.startswith("slowframe: error:") and "Traceback" not in err


def test_the_download_can_wait_on_another_drive_than_the_model(hub, reference, tmp_path):
    """On the frame: the files on the root partition, the model on the models partition."""
    with small_disk(tmp_path / "root-partition", "128m") as mounted:
        if not mounted:
            pytest.skip("needs root to mount a second filesystem")
        lines = []
        report = download_model("acme/tiny-xl", tmp_path / "tiny", tmp_path, download_dir=tmp_path / "root-partition",
                                log=lines.append)
        assert any(f"into {tmp_path / 'root-partition' / '.tiny.download'}" in line for line in lines)
        assert list((tmp_path / "root-partition").iterdir()) == []
        assert report.peak_disk == max(report.bytes, report.imported.bytes_out)
    same_weights(tmp_path / "tiny", reference / "diffusers")


def test_hf_token_goes_to_the_hub_and_nowhere_else(hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    hub.storage = hub.plain_url                      # LFS files redirect to another host, as the hub's do
    download_model("acme/tiny-single/tiny_xl.safetensors", tmp_path / "a", tmp_path, log=quiet)
    assert "/api/models/acme/tiny-single/tree/main" in hub.authorized
    assert "/acme/tiny-single/resolve/main/tiny_xl.safetensors" in hub.authorized
    assert [p for p, _ in hub.requests if p.startswith("/cdn/")] and not [p for p in hub.authorized if "/cdn/" in p]
    before = len(hub.authorized)
    download_model(f"{hub.plain_url}/files/tiny_xl.safetensors", tmp_path / "b", tmp_path, log=quiet)
    assert len(hub.authorized) == before
