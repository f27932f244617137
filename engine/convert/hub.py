"""What `slowframe models download` fetches: REPO_OR_URL (a Hugging Face repository, a file
in one, or any https:// link to a .safetensors model) as the list of files an SDXL import
needs, each with the size and sha256 the server lists.

The hub is read through its plain HTTP API, no login: the tree API
(GET /api/models/ORG/NAME/tree/REV?recursive=true, paged by Link headers) lists every file
with its size, git blob id and, for files in LFS, the content's sha256; files come from
/ORG/NAME/resolve/REV/PATH. HF_ENDPOINT names another hub (a mirror; the tests' local
server); HF_TOKEN, when set, is sent to it for gated or private repositories.

A diffusers repository gives model_index.json, each component's config.json and its
weights (the .fp16 variant when there is one, as engine/weights.py's find_weight_files
prefers; sharded ones through their index), and the tokenizer and scheduler folders; the
single-file checkpoints and pickles many repositories also hold are left out.
"""

from __future__ import annotations

import json
import os
import re
import struct
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from engine import json_limits
from engine.convert.diffusers_source import COPIED, STEMS
from engine.convert.fetch import Remote, fetch, linked_remote, open_url
from engine.convert.sgm_source import identify
from engine.errors import InputError, ModelFileError
from engine.safetensors import MAX_HEADER_BYTES, MAX_HEADER_DEPTH, PICKLE_SUFFIXES

HUB = "https://huggingface.co"
HUB_HOSTS = ("huggingface.co", "www.huggingface.co", "hf.co")
NAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class Listing:
    """What to fetch: `files` (path in the download folder -> where from), small ones first."""

    source: str                     # what the import reads: a folder or file in the download folder
    files: dict[str, Remote] = field(default_factory=dict)

    def bytes(self) -> int | None:
        sizes = [r.size for r in self.files.values()]
        return None if None in sizes else sum(sizes)


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", HUB).rstrip("/")


def auth_headers(url: str) -> dict[str, str]:
    """HF_TOKEN for requests to the hub (never to other servers)."""
    token = os.environ.get("HF_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token and url.startswith(endpoint() + "/") else {}


def model_name(spec: str) -> str:
    """A model folder name for REPO_OR_URL: the repository's or the file's name."""
    repo, _, path = _parse(spec)
    if repo is None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(spec).path)
    name = PurePosixPath(path).name if path else repo.split("/")[1]
    return _folder_name(name[:-len(".safetensors")] if name.lower().endswith(".safetensors") else name)


def list_files(spec: str, root: Path, log: Callable[[str], object] = print) -> Listing:
    """Resolve REPO_OR_URL. A diffusers repository's small files (model_index.json, configs,
    shard indexes) are fetched into `root` on the way, so that it can be checked to be an
    SDXL model before any weights are."""
    repo, revision, path = _parse(spec)
    if repo is None:
        return _plain_url(spec)
    if path is not None:
        return _repo_file(repo, revision, path)
    tree = _tree(repo, revision)
    if "model_index.json" in tree:
        return _diffusers(repo, revision, tree, root, log)
    singles = sorted(p for p in tree if p.endswith(".safetensors") and "/" not in p)
    if len(singles) == 1:
        return _repo_file(repo, revision, singles[0], tree[singles[0]])
    if singles:
        raise InputError(f"{repo}: the repository holds several single-file models ({', '.join(singles)}); name "
                         f"one, e.g. slowframe models download {repo}/{singles[0]}")
    raise ModelFileError(f"{repo}: not an SDXL model repository: no model_index.json (a diffusers model) and no "
                         ".safetensors file at its top level")


def check_single_file(remote: Remote, origin: str) -> Remote:
    """Read only the safetensors header at the start of a single-file model (two small Range
    requests) and refuse what is not an SDXL model before the gigabytes come; returns the
    Remote with the size and sha256 the server's headers give when the listing had none."""
    head, linked, size = _first_bytes(remote.url, 0, 8)
    (n,) = struct.unpack("<Q", head) if len(head) == 8 else (MAX_HEADER_BYTES + 1,)
    if n > MAX_HEADER_BYTES:
        raise ModelFileError(f"{origin}: not a .safetensors file (its first bytes are no safetensors header). "
                             "Link the .safetensors file itself (a model page's download link may lead to a "
                             "login page instead)")
    raw, _, _ = _first_bytes(remote.url, 8, n)
    try:
        header = json_limits.loads(raw, MAX_HEADER_DEPTH)
        shapes = {k: tuple(v["shape"]) for k, v in header.items() if k != "__metadata__"}
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ModelFileError(f"{origin}: not a .safetensors file (corrupt header: {e})") from None
    identify(shapes, Path(origin))
    if remote.size is None and remote.sha256 is None:
        return linked_remote(remote.url, linked, size)
    return remote


def _parse(spec: str) -> tuple[str | None, str, str | None]:
    """(repository or None for a plain URL, revision, file in the repository or None)."""
    url = urllib.parse.urlsplit(spec)
    if url.scheme in ("http", "https"):
        if url.netloc.lower() not in HUB_HOSTS and f"{url.scheme}://{url.netloc}" != endpoint():
            return None, "", None
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/")]
        if len(parts) == 2:
            return "/".join(parts), "main", None
        if len(parts) >= 4 and parts[2] == "tree":
            return "/".join(parts[:2]), parts[3], None
        if len(parts) >= 5 and parts[2] in ("blob", "resolve"):
            return "/".join(parts[:2]), parts[3], "/".join(parts[4:])
        raise InputError(f"{spec}: not a link to a model repository or to a file in one (expected "
                         "https://huggingface.co/ORG/NAME or .../ORG/NAME/blob/main/FILE.safetensors)")
    parts = spec.strip("/").split("/")
    if len(parts) == 2 and all(parts) and not url.scheme:
        return spec.strip("/"), "main", None
    if len(parts) > 2 and all(parts) and not url.scheme and parts[-1].endswith(".safetensors"):
        return "/".join(parts[:2]), "main", "/".join(parts[2:])
    raise InputError(f"{spec!r}: expected a Hugging Face repository (ORG/NAME, e.g. stabilityai/sdxl-turbo), a "
                     "file in one (ORG/NAME/FILE.safetensors) or an https:// link to a .safetensors model")


def _resolve_url(repo: str, revision: str, path: str) -> str:
    quote = urllib.parse.quote
    return f"{endpoint()}/{repo}/resolve/{quote(revision, safe='')}/{quote(path)}"


def _tree(repo: str, revision: str, folder: str = "") -> dict[str, Remote]:
    """Every file of the repository (or of `folder` in it, not recursively), by path."""
    quote = urllib.parse.quote
    url = f"{endpoint()}/api/models/{repo}/tree/{quote(revision, safe='')}"
    url += f"/{quote(folder)}" if folder else "?recursive=true"
    files: dict[str, Remote] = {}
    while url:
        response, _ = open_url(url, auth_headers(url))
        with response:
            try:
                entries = json.loads(response.read())
                for entry in entries:
                    if entry.get("type") != "file":
                        continue
                    lfs = entry.get("lfs") or {}
                    files[entry["path"]] = Remote(_resolve_url(repo, revision, entry["path"]), int(entry["size"]),
                                                  str(lfs["oid"]).lower() if lfs else None,
                                                  None if lfs else str(entry["oid"]).lower())
            except (ValueError, TypeError, KeyError, AttributeError) as e:
                raise ModelFileError(f"{url}: the hub's file listing is not what slowframe understands ({e}); "
                                     "is HF_ENDPOINT a Hugging Face hub?") from None
            url = _next_page(response.headers.get("Link", ""))
    return files


def _next_page(link: str) -> str:
    match = re.search(r'<([^>]+)>\s*;\s*rel="?next"?', link)
    return match.group(1) if match else ""


def _repo_file(repo: str, revision: str, path: str, remote: Remote | None = None) -> Listing:
    if PurePosixPath(path).suffix.lower() in PICKLE_SUFFIXES:
        raise ModelFileError(f"{repo}/{path}: a pickle file; slowframe reads only .safetensors models (unpickling "
                             "runs whatever code the file contains). Pick the .safetensors file of this model")
    if remote is None:
        parent = str(PurePosixPath(path).parent)
        remote = _tree(repo, revision, "" if parent == "." else parent).get(path)
        if remote is None:
            raise ModelFileError(f"{repo}: no file {path} at revision {revision}")
    remote = check_single_file(remote, f"{repo}/{path}")
    return _single(PurePosixPath(path).name, remote)


def _plain_url(url: str) -> Listing:
    name = PurePosixPath(urllib.parse.unquote(urllib.parse.urlsplit(url).path)).name
    if PurePosixPath(name).suffix.lower() in PICKLE_SUFFIXES:
        raise ModelFileError(f"{url}: a pickle file; slowframe reads only .safetensors models (unpickling runs "
                             "whatever code the file contains). Link the model's .safetensors file")
    return _single(name, check_single_file(Remote(url), url))


def _single(name: str, remote: Remote) -> Listing:
    """A single-file model, kept under its own name (which `models list` shows as the source)."""
    name = NAME.sub("-", name).strip("-.") or "model"
    if not name.lower().endswith(".safetensors"):
        name += ".safetensors"
    return Listing(name, {name: remote})


def _diffusers(repo: str, revision: str, tree: dict[str, Remote], root: Path, log) -> Listing:
    name = repo.split("/")[1]
    listing = Listing(name)
    folder = root / name
    index = tree["model_index.json"]
    fetch(index, folder / "model_index.json", log, auth_headers(index.url))
    listing.files[f"{name}/model_index.json"] = index
    _check_index(folder / "model_index.json", repo)
    missing = [c for c in STEMS if f"{c}/config.json" not in tree]
    if missing:
        refiner = missing == ["text_encoder"]
        raise ModelFileError(f"{repo}: no {', '.join(f'{c}/' for c in missing)} in the repository; slowframe needs "
                             "the UNet, both text encoders and the VAE." + (
                                 " It looks like the SDXL refiner, which only polishes the base model's pictures "
                                 "and cannot draw from a prompt alone." if refiner else ""))
    small = [f"{c}/config.json" for c in STEMS]
    small += sorted(p for p in tree if p.split("/")[0] in COPIED and p.count("/") == 1)
    for path in small:
        listing.files[f"{name}/{path}"] = tree[path]
        fetch(tree[path], folder / path, log, auth_headers(tree[path].url))
    for component, stem in STEMS.items():
        for path in _weights(repo, component, stem, tree, folder, log):
            listing.files[f"{name}/{path}"] = tree[path]
    return listing


def _check_index(path: Path, repo: str) -> None:
    try:
        kind = json.loads(path.read_text()).get("_class_name", "?")
    except (OSError, ValueError, AttributeError) as e:
        raise ModelFileError(f"{repo}: its model_index.json is unreadable ({e})") from None
    if not str(kind).startswith("StableDiffusionXL"):
        raise ModelFileError(f"{repo}: this is a {kind} model; slowframe runs SDXL 1.0-architecture models "
                             "(StableDiffusionXLPipeline: SDXL base, SDXL-Turbo and their fine-tunes). Nothing "
                             "large was downloaded")


def _weights(repo: str, component: str, stem: str, tree: dict[str, Remote], folder: Path, log) -> list[str]:
    """The weight files of one component, as find_weight_files would pick them; a shard
    index is fetched to learn its shards."""
    for variant in (".fp16", ""):
        single = f"{component}/{stem}{variant}.safetensors"
        if single in tree:
            return [single]
        index = f"{component}/{stem}.safetensors.index{variant}.json"
        if index in tree:
            fetch(tree[index], folder / index, log, auth_headers(tree[index].url))
            try:
                shards = sorted(set(json.loads((folder / index).read_text())["weight_map"].values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                raise ModelFileError(f"{repo}/{index}: unreadable shard index ({e})") from None
            missing = [s for s in shards if f"{component}/{s}" not in tree]
            if missing:
                raise ModelFileError(f"{repo}/{index}: lists shard(s) the repository does not have: "
                                     f"{', '.join(missing)}")
            return [index] + [f"{component}/{s}" for s in shards]
    pickles = sorted(p for p in tree if p.startswith(component + "/") and PurePosixPath(p).suffix in PICKLE_SUFFIXES)
    if pickles:
        raise ModelFileError(f"{repo}: {component}/ has only pickle weights ({', '.join(pickles)}); slowframe reads "
                             ".safetensors only (unpickling runs whatever code the file contains)")
    raise ModelFileError(f"{repo}: no {component}/ weights ({stem}.safetensors); slowframe needs the UNet, both "
                         "text encoders and the VAE of an SDXL model")


def _first_bytes(url: str, start: int, n: int) -> tuple[bytes, dict[str, str], int | None]:
    """Bytes start..start+n of `url`: a Range request, or the start of the whole file when
    the server ignores Range; with the X-Linked-* headers and the file's size if told."""
    response, linked = open_url(url, dict(auth_headers(url), Range=f"bytes={start}-{start + n - 1}"))
    with response:
        total = re.match(r"bytes \d+-\d+/(\d+)$", response.headers.get("Content-Range", ""))
        size = int(total.group(1)) if total else None
        if response.status != 206:
            size = int(response.headers["Content-Length"]) if response.headers.get("Content-Length", "").isdigit() \
                else None
            response.read(start)
        return response.read(n), linked, size


def _folder_name(text: str) -> str:
    return NAME.sub("-", text).strip("-.").lower() or "model"
