"""`slowframe models download`: a hub-shaped local server (tests/hub_server.py) stands in for the
Hugging Face hub; downloads resume, refuse or re-fetch damaged files, and import to the same
model folder as `models import` of the same files, while they arrive, giving the downloaded
bytes back as the import takes them in. Nothing here reaches the internet."""

from __future__ import annotations

import json
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from engine.convert import download as download_module
from engine.convert import fetch as fetch_module
from engine.convert import holes, sha256_state
from engine.convert import importer as importer_module
from engine.convert.download import download_folder, download_model
from engine.convert.fetch import Remote, fetch
from engine.convert.importer import import_model
from engine.convert.layout import COMPONENTS, weight_file
from engine.errors import EngineError, ModelFileError, NetworkError, StorageError
from engine.safetensors import read_header
from frame.cli import main
from hub_server import HubServer
from disk_sampler import DiskSampler
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


STEP = 1 << 20          # the tiny model's files are 3-22 MB: progress made durable every MB shows what happens
AHEAD = 2 << 20


@pytest.fixture
def small_steps(monkeypatch):
    """Progress made durable (and downloaded bytes given back) every MB instead of every 64 MB, and the download
    at most 2 MB ahead of the import, so that the tiny model shows the behaviour of a full-size one."""
    monkeypatch.setattr(fetch_module, "DURABLE_BYTES", STEP)
    monkeypatch.setattr(importer_module, "DURABLE_BYTES", STEP)
    monkeypatch.setattr(download_module, "AHEAD_BYTES", AHEAD)


def header_end(path: Path) -> int:
    """Where a safetensors file's data starts (the download fetches the header first)."""
    with open(path, "rb") as f:
        return 8 + struct.unpack("<Q", f.read(8))[0]


def wait_until(condition, what: str, timeout: float = 120.0) -> None:
    """Poll `condition` (a safety limit, not a measurement: the server holds the rest of the file meanwhile)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def converted(dest: Path) -> int:
    """Tensors the import into `dest` has made durable so far."""
    try:
        state = json.loads((dest.parent / f".{dest.name}.partial" / ".import-state.json").read_text())
    except (OSError, ValueError):
        return 0
    return sum(len(record.get("done", ())) for record in state["files"].values())


def gives_back(folder: Path) -> None:
    if not (holes.supported(folder) and sha256_state.available()):
        pytest.skip(f"{folder}'s filesystem cannot punch holes, or libcrypto is missing: nothing is given back "
                    "(test_where_nothing_can_be_given_back_the_import_still_follows covers that)")


def durable(part: Path) -> int:
    """Bytes of a file being downloaded that its progress record vouches for."""
    try:
        return json.loads(part.with_name(part.name + ".json").read_text())["durable_bytes"]
    except (OSError, ValueError):
        return 0


# spec -> the largest file: its name, its repository and path there, its path in the download folder; the reference
WHERE = {"acme/tiny-single/tiny_xl.safetensors": ("tiny_xl.safetensors", "acme/tiny-single", "tiny_xl.safetensors",
                                                  "tiny_xl.safetensors", "single"),
         "acme/tiny-xl": (UNET_FP16, "acme/tiny-xl", f"unet/{UNET_FP16}", f"tiny-xl/unet/{UNET_FP16}", "diffusers")}


@pytest.mark.parametrize("spec", list(WHERE))
def test_the_import_follows_the_download_and_gives_its_bytes_back(hub, reference, tmp_path, small_steps, spec):
    """The server holds the largest file at two thirds: by then tensors from it are converted and durable and
    the bytes they came from no longer take disk space; the disk peak is the model plus what is in flight."""
    gives_back(tmp_path)
    name, repo, in_repo, path, kind = WHERE[spec]
    size = (hub.repos[repo] / in_repo).stat().st_size
    go = threading.Event()
    hub.hold[name] = (size * 2 // 3, go)
    dest = tmp_path / "tiny"
    part = download_folder(dest) / (path + ".part")
    result = {}
    thread = threading.Thread(target=lambda: result.update(report=download_model(spec, dest, tmp_path, log=quiet)))
    with DiskSampler([download_folder(dest), dest.parent / ".tiny.partial", dest]) as outside:
        thread.start()
        try:
            wait_until(lambda: durable(part) > size * 2 // 3 - STEP and converted(dest) > 0
                       and holes.disk_bytes(part) < size // 3,
                       "tensors converted and their bytes given back while the server holds the file")
            assert name in hub.hold or not go.is_set()      # the rest of the file was not sent yet
            assert not dest.exists()
        finally:
            go.set()
            thread.join()
    report = result["report"]
    same_weights(dest, reference / kind)
    assert not download_folder(dest).exists()
    # measured, not estimated: never above what an outside observer saw by more than one step of each writer
    assert outside.peak <= report.peak_disk + 2 * STEP + (1 << 20)
    # the model, the small files kept to the end, and in flight: the download's lead on the import, a step of each
    # writer, and the largest tensor (converted once all of it is there; the tiny model's text encoders are mostly one)
    weights = {p: info for p in hub.repos[repo].rglob("*.safetensors") if p.name in (name, "model.safetensors")
               or (p.parent.name == "vae") for info in [read_header(p)]}
    largest = max(t.nbytes for header in weights.values() for t in header.values())
    small = report.bytes - sum(p.stat().st_size for p in weights)
    assert report.imported.bytes_out <= report.peak_disk
    assert report.peak_disk <= report.imported.bytes_out + small + largest + AHEAD + 2 * STEP + (1 << 20)
    assert report.peak_disk < report.bytes + report.imported.bytes_out - report.bytes // 4    # the old way's sum


def test_where_nothing_can_be_given_back_the_import_still_follows(hub, reference, tmp_path, small_steps,
                                                                  monkeypatch):
    """A filesystem without hole punching (exFAT): converted while arriving, the download kept whole to the end."""
    monkeypatch.setattr(download_module.holes, "supported", lambda folder: False)
    file = hub.repos["acme/tiny-single"] / "tiny_xl.safetensors"
    go = threading.Event()
    hub.hold["tiny_xl.safetensors"] = (file.stat().st_size // 2, go)
    dest = tmp_path / "tiny"
    part = download_folder(dest) / "tiny_xl.safetensors.part"
    result = {}
    thread = threading.Thread(target=lambda: result.update(report=download_model(
        "acme/tiny-single/tiny_xl.safetensors", dest, tmp_path, log=quiet)))
    thread.start()
    try:
        wait_until(lambda: converted(dest) > 0 and durable(part) > file.stat().st_size // 2 - STEP,
                   "tensors converted while the server holds the file")
        assert holes.disk_bytes(part) >= durable(part)
    finally:
        go.set()
        thread.join()
    report = result["report"]
    same_weights(dest, reference / "single")
    assert report.peak_disk >= report.bytes + report.imported.bytes_out


CHILD = """
import sys
from engine.convert import download, fetch, importer
fetch.DURABLE_BYTES = importer.DURABLE_BYTES = int(sys.argv[4])
download.AHEAD_BYTES = int(sys.argv[5])
download.download_model(sys.argv[1], sys.argv[2], sys.argv[3], log=lambda line: None)
"""


@pytest.mark.parametrize("spec", list(WHERE))
def test_a_download_killed_while_importing_resumes_to_the_same_model(hub, reference, tmp_path, small_steps, spec):
    """SIGKILL with tensors converted and downloaded bytes already given back: the next run continues the
    file's sha256 from its saved state, keeps the converted tensors, and makes the same model."""
    gives_back(tmp_path)
    name, repo, in_repo, path, kind = WHERE[spec]
    size = (hub.repos[repo] / in_repo).stat().st_size
    go = threading.Event()
    hub.hold[name] = (size // 2, go)
    dest = tmp_path / "tiny"
    part = download_folder(dest) / (path + ".part")
    child = subprocess.Popen([sys.executable, "-c", CHILD, spec, str(dest), str(tmp_path), str(STEP), str(AHEAD)],
                             cwd=Path(__file__).resolve().parents[3])
    try:
        wait_until(lambda: durable(part) > size // 2 - STEP and converted(dest) > 0
                   and holes.disk_bytes(part) < size // 4, "the killed run to convert tensors and give bytes back")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        go.set()
    before = converted(dest)
    lines = []
    report = download_model(spec, dest, tmp_path, log=lines.append)
    same_weights(dest, reference / kind)
    assert report.imported.resumed_bytes > 0 and before > 0
    assert report.resumed >= size // 3 and report.received < report.bytes
    assert not [line for line in lines if "again" in line], lines      # nothing fetched or converted twice


def test_bytes_damaged_on_the_way_are_not_taken_for_a_damaged_model(hub, reference, tmp_path, small_steps):
    """A byte turned into an fp16 infinity in transit makes a tensor look like a broken model's; the file's sha256
    at its end tells the transfer was at fault: the file is fetched again and the tensor converted again."""
    file = hub.repos["acme/tiny-xl"] / "unet" / UNET_FP16
    tensor = min((t for t in read_header(file).values() if t.dtype == "F16" and t.offset > file.stat().st_size // 2),
                 key=lambda t: t.offset)
    hub.poison[UNET_FP16] = (tensor.offset + 1, 0x7C)      # its first value's high byte: exponent all ones
    lines = []
    download_model("acme/tiny-xl", tmp_path / "tiny", tmp_path, log=lines.append)
    assert any(UNET_FP16 in line and "sha256" in line and "fetching it again" in line for line in lines), lines
    same_weights(tmp_path / "tiny", reference / "diffusers")


def test_a_file_that_fails_its_check_voids_what_was_converted_from_it(hub, reference, tmp_path, small_steps):
    hub.corrupt[UNET_FP16] = 1
    lines = []
    download_model("acme/tiny-xl", tmp_path / "tiny", tmp_path, log=lines.append)
    assert any(UNET_FP16 in line and "sha256" in line and "fetching it again" in line for line in lines), lines
    assert any(UNET_FP16 in line and "converting the" in line and "read from it again" in line for line in lines)
    same_weights(tmp_path / "tiny", reference / "diffusers")


def test_a_diffusers_repository_downloads_and_imports_as_models_import_does(hub, reference, tmp_path):
    (tmp_path / "models").mkdir()
    report = download_model("acme/tiny-xl", None, tmp_path / "models", log=quiet)
    dest = tmp_path / "models" / "tiny-xl"
    assert report.dest == dest
    same_weights(dest, reference / "diffusers")
    assert not download_folder(dest).exists()
    repo = hub.repos["acme/tiny-xl"]
    weights = sum((repo / path).stat().st_size for path in (
        f"unet/{UNET_FP16}", "vae/diffusion_pytorch_model.safetensors", "text_encoder/model.safetensors",
        "text_encoder_2/model.safetensors"))
    # none of the weights counted as kept from an earlier run (their headers, fetched ahead, came in this one);
    # the small files the listing fetched are, as before
    assert report.resumed <= report.bytes - weights
    assert report.checked == {"sha256": 4, "git sha1": report.files - 4}
    assert report.imported.bytes_out <= report.peak_disk <= report.bytes + report.imported.bytes_out + (1 << 20)
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


def test_an_interrupted_download_resumes_where_it_stopped(hub, reference, tmp_path, small_steps):
    file = hub.repos["acme/tiny-xl"] / "unet" / UNET_FP16
    size, start = file.stat().st_size, header_end(file)
    hub.cut[UNET_FP16] = size // 3
    with pytest.raises(NetworkError, match="run the same command again to resume"):
        download_model("acme/tiny-xl", tmp_path / "tiny", tmp_path, log=quiet, retries=0)
    record = download_folder(tmp_path / "tiny") / "tiny-xl" / "unet" / (UNET_FP16 + ".part.json")
    assert json.loads(record.read_text())["durable_bytes"] == start + size // 3
    assert converted(tmp_path / "tiny") > 0
    report = download_model("acme/tiny-xl", tmp_path / "tiny", tmp_path, log=quiet)
    assert hub.downloads(UNET_FP16)[-1] == f"bytes={start + size // 3}-"
    assert report.resumed >= size // 3 and report.received < report.bytes
    assert report.imported.resumed_bytes > 0
    same_weights(tmp_path / "tiny", reference / "diffusers")


def test_a_dropped_connection_is_resumed_within_the_run(hub, reference, tmp_path, tiny_single_file):
    hub.cut["tiny_xl.safetensors"] = 1000
    lines = []
    download_model(f"{hub.plain_url}/files/tiny_xl.safetensors", tmp_path / "tiny", tmp_path, log=lines.append,
                   sleep=no_sleep)
    start = header_end(tiny_single_file.sgm)
    assert hub.downloads("tiny_xl.safetensors")[-2:] == [f"bytes={start}-", f"bytes={start + 1000}-"]
    assert any("connection lost at" in line for line in lines)
    same_weights(tmp_path / "tiny", reference / "single")


def test_a_connection_cut_again_and_again_goes_on_while_bytes_come(hub, tmp_path, tiny_single_file):
    """Only failures in a row without progress count against the retries (a long download over a flaky link)."""
    data = tiny_single_file.sgm.read_bytes()
    remote = Remote(f"{hub.plain_url}/files/tiny_xl.safetensors", len(data),
                    fetch_module.hashlib.sha256(data).hexdigest())
    hub.cut["tiny_xl.safetensors"] = [1000, 1000, 1000]
    fetch(remote, tmp_path / "x.safetensors", log=quiet, retries=1, sleep=no_sleep)
    assert hub.downloads("tiny_xl.safetensors") == [None, "bytes=1000-", "bytes=2000-", "bytes=3000-"]
    assert (tmp_path / "x.safetensors").read_bytes() == data
    hub.cut["tiny_xl.safetensors"] = [0, 0]
    with pytest.raises(NetworkError, match="failed 2 times in a row"):
        fetch(remote, tmp_path / "y.safetensors", log=quiet, retries=1, sleep=no_sleep)


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


def test_a_resumed_file_continues_its_sha256_from_the_saved_state(hub, tmp_path, tiny_single_file):
    """The bytes before the durable point may be given back already (holes read as zeros): the check at the end
    continues from the state saved with the record instead of hashing them again."""
    if not sha256_state.available():
        pytest.skip("libcrypto's SHA256_* are not available here")
    data = tiny_single_file.sgm.read_bytes()
    remote = Remote(f"{hub.plain_url}/files/tiny_xl.safetensors", len(data),
                    fetch_module.hashlib.sha256(data).hexdigest())
    prefix = sha256_state.Sha256()
    prefix.update(data[:5000])
    (tmp_path / "x.safetensors.part").write_bytes(b"\0" * 5000)
    (tmp_path / "x.safetensors.part.json").write_text(json.dumps(
        {"url": remote.url, "size": remote.size, "sha256": remote.sha256, "git_sha1": None, "durable_bytes": 5000,
         "attempt": "a", "sha256_state": prefix.state().hex()}))
    got = fetch(remote, tmp_path / "x.safetensors", log=quiet)
    assert hub.downloads("tiny_xl.safetensors") == ["bytes=5000-"]
    assert got.checked == "sha256" and got.sha256 == remote.sha256
    assert (tmp_path / "x.safetensors").read_bytes()[5000:] == data[5000:]


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
    start = header_end(hub.repos["acme/tiny-xl"] / "unet" / UNET_FP16)
    assert hub.downloads(UNET_FP16) == ["bytes=0-7", f"bytes=8-{start - 1}", f"bytes={start}-", None]
    same_weights(tmp_path / "tiny", reference / "diffusers")


def test_a_file_corrupted_every_time_is_refused_and_not_kept(hub, tmp_path):
    hub.corrupt["config.json"] = 99
    with pytest.raises(ModelFileError, match="git blob id .* twice in a row"):
        download_model("acme/tiny-xl", tmp_path / "tiny", tmp_path, log=quiet)
    assert not list(download_folder(tmp_path / "tiny").rglob("*.part"))
    assert not (tmp_path / "tiny").exists()


def test_a_server_that_ignores_range_restarts_the_file(hub, reference, tmp_path, tiny_single_file):
    hub.cut["tiny_xl.safetensors"] = 1000
    hub.ignore_range = True
    report = download_model("acme/tiny-single/tiny_xl.safetensors", tmp_path / "tiny", tmp_path, log=quiet,
                            sleep=no_sleep)
    # the whole file each time: cut after 1000 bytes of it, then all of it from its first byte
    assert hub.downloads("tiny_xl.safetensors")[-2:] == [f"bytes={header_end(tiny_single_file.sgm)}-", "bytes=1000-"]
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
        assert report.imported.bytes_out <= report.peak_disk <= max(report.bytes, report.imported.bytes_out) + (1 << 20)
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
