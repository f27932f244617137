#!/usr/bin/env python3
"""Benchmark of `slowframe models download` on a full-size single-file SDXL model: memory and disk.

Serves bench/models_import.py's random model with exactly sd_xl_base_1.0.safetensors' tensors
(6.94 GB, fp16) as a file in a hub-shaped repository from tests/hub_server.py on localhost, then
downloads and imports it in a fresh subprocess per precision (the download checked against the
tree API's sha256), imported as it arrives, and reports seconds, the subprocess's peak RSS (VmHWM)
and the disk peak two ways: the most the download folder and the model folder held at once (their
files' allocated blocks, holes excluded) sampled here every 0.2 s, and the report's own figure,
summed at every fsync of the download or the import. The network is localhost, so the download
outruns the import and waits for it (AHEAD_BYTES): the seconds are the frame's CPU and disk work,
not a WiFi download. With --rate the server paces every download to that many MB/s (a stand-in
for WiFi) and `models import` of the same file is timed alone too, in the same run: download and
import as it arrives against the two one after the other. Big files go to
${SLOWFRAME_BENCH_CACHE:-~/.cache/slowframe-bench}/models-import/ (shared with bench/models_import.py)
and are deleted at the end unless --keep. Needs ~14 GB free. Run:

    nice -n 10 python bench/models_download.py --precisions uint8 [--rate 40]

Not run in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo's engine, if not installed
import engine  # noqa: E402,F401  (before numpy: it sets OpenBLAS's thread spin, read when numpy loads)

from harness import REPO  # noqa: E402  (bench/, the script's own folder)
from models_import import CACHE, write_single_file  # noqa: E402

sys.path.insert(0, str(REPO / "tests"))
from disk_sampler import DiskSampler  # noqa: E402
from hub_server import HubServer  # noqa: E402

IMPORT_CHILD = """
import json, sys, time
from engine.convert.importer import import_model
from engine.trace import peak_rss_bytes
started = time.monotonic()
import_model(sys.argv[1], sys.argv[2], precision=sys.argv[3], log=lambda line: None)
print(json.dumps({"seconds": time.monotonic() - started, "peak_rss": peak_rss_bytes()}))
"""

CHILD = """
import json, sys, time
from engine.convert.download import download_model
from engine.trace import peak_rss_bytes
started = time.monotonic()
report = download_model(sys.argv[1], sys.argv[2], sys.argv[3], precision=sys.argv[4], download_dir=sys.argv[5],
                        log=lambda line: print(line, flush=True))
print(json.dumps({"seconds": time.monotonic() - started, "peak_rss": peak_rss_bytes(), "bytes": report.bytes,
                  "bytes_out": report.imported.bytes_out, "checked": report.checked, "peak_disk": report.peak_disk}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precisions", nargs="+", default=["uint8", "fp16"], choices=["uint8", "fp16"])
    parser.add_argument("--keep", action="store_true", help="keep the model file")
    parser.add_argument("--rate", type=float, metavar="MB_PER_S", help="pace the server (a stand-in for WiFi); "
                        "then `models import` of the same file is timed too, to compare with download + import")
    args = parser.parse_args()
    repo = CACHE / "repo"
    single_file = repo / "sd_xl_base_1.0.safetensors"
    repo.mkdir(parents=True, exist_ok=True)
    try:
        if not single_file.exists():
            print(f"writing a random full-size SDXL single-file model to {single_file}", flush=True)
            write_single_file(single_file)
        server = HubServer()
        server.repos = {"bench/sdxl-random": repo}
        server.tree("bench/sdxl-random", "", True)      # its sha256 now: the listing must answer within seconds
        server.rate = args.rate * 1e6 if args.rate else None
        with server:
            results = {}
            for precision in args.precisions:
                work = CACHE / f"download-{precision}"
                shutil.rmtree(work, ignore_errors=True)
                (work / "models").mkdir(parents=True)
                print(f"downloading and importing as {precision} ...", flush=True)
                with DiskSampler([work], every=0.2) as disk:
                    proc = subprocess.run(
                        [sys.executable, "-c", CHILD, "bench/sdxl-random/sd_xl_base_1.0.safetensors",
                         str(work / "models" / "sdxl"), str(work / "models"), precision, str(work / "downloads")],
                        cwd=REPO, capture_output=True, text=True, env={**os.environ, "HF_ENDPOINT": server.url})
                if proc.returncode:
                    sys.exit(f"download failed:\n{proc.stdout}\n{proc.stderr}")
                result = json.loads(proc.stdout.strip().splitlines()[-1])
                result["sampled_disk_peak"] = disk.peak
                results[precision] = result
                print(f"  {precision}: {result['seconds']:.0f} s, peak RSS {result['peak_rss'] / 2**20:.0f} MiB, "
                      f"{result['bytes'] / 1e9:.2f} GB downloaded ({result['checked']}) -> "
                      f"{result['bytes_out'] / 1e9:.2f} GB; disk peak {disk.peak / 1e9:.2f} GB sampled, "
                      f"{result['peak_disk'] / 1e9:.2f} GB by the report", flush=True)
                shutil.rmtree(work)
                if args.rate:
                    (work / "models").mkdir(parents=True)
                    proc = subprocess.run([sys.executable, "-c", IMPORT_CHILD, str(single_file),
                                           str(work / "models" / "sdxl"), precision],
                                          cwd=REPO, capture_output=True, text=True, check=True)
                    alone = json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]
                    fetching = single_file.stat().st_size / server.rate
                    result.update(import_alone=alone, download_alone=fetching)
                    print(f"  {precision} at {args.rate:g} MB/s: download and import {result['seconds']:.0f} s; "
                          f"the download alone {fetching:.0f} s (the server's pace), `models import` alone "
                          f"{alone:.0f} s: one after the other {fetching + alone:.0f} s", flush=True)
                    shutil.rmtree(work)
        print(json.dumps(results, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    main()
