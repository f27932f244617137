#!/usr/bin/env python3
"""Benchmark: how much of a slow card's reading hides behind the UNet's compute.

On a Pi Zero 2 W the UNet's 5.1 GB of fp16 weights come off a microSD card at ~20 MB/s
while the cores compute; the `nocache` weights provider (engine/weights.py) asks the
kernel to read the next ops' bytes ahead (posix_fadvise WILLNEED) so the two overlap.
This script measures that overlap here, on a card slowed to the Pi's proportions: one
full-size random SDXL UNet evaluation in `rpi-lowmem`, cold page cache, its reads
throttled by a cgroup (blkio.throttle.read_bps_device, or io.max on cgroup v2) to a
rate at which reading the bytes an evaluation needs (its weights but the cross-attention
K/V projections, which the second and later evaluations of a prompt skip) takes K times its
compute time (K from --read-ratios; the Pi projection has K ~0.3-0.4 for the UNet,
bench/pi_projection.py). Bytes read beyond those (pages read ahead, then dropped for want of
room before their op ran, and read again) count in the reading time.

    C = free s/eval, R = bytes read / throttled rate, T = throttled s/eval
    overlap = 1 - (T - max(C, R)) / min(C, R)

so T = max(C, R) + (1 - overlap) * min(C, R): 1.0 means the shorter of reading and
computing hid entirely behind the longer, 0.0 that they took turns. The free case reads
from this machine's disk unthrottled (much faster than the compute needs), so its time
is the compute time C. Cases alternate in rounds (the machine drifts); each runs in a fresh
process through bench/unet_full.py's child, and s/eval is its second evaluation. Every case
runs inside the 256 MiB memory cgroup of the other benchmarks too (bench/harness.py; page
cache included, as on a Pi), so the pages read ahead must find room beside the process.

    python bench/card_overlap.py                      # 128x128, K = 0.4, 1, 2.5, 2 rounds
    python bench/card_overlap.py --size 96x160 --read-ratios 0.4 --rounds 3
    python bench/card_overlap.py --no-memory-cgroup         # no memory limit
    python bench/card_overlap.py --variant readahead_bytes=8388608 --variant readahead_bytes=33554432

Needs root (a cgroup) and the model on a block device. Not run in CI.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import unet_full   # noqa: E402  (bench/, the script's own folder: weights, inputs and the child)
from harness import (CACHE, CGROUP_ROOT, MB, cg_read, cg_write, cgroup_create, cgroup_remove, cgroup_stats,
                     cgroup_unavailable_reason, describe_cgroup, log, print_table, write_json)

CGROUP_NAME = "slowframe-bench-card"
V1_ROOT = Path("/sys/fs/cgroup/blkio")
V2_ROOT = Path("/sys/fs/cgroup/unified") if Path("/sys/fs/cgroup/unified/cgroup.procs").is_file() \
    else Path("/sys/fs/cgroup")


def block_device(path: Path) -> str:
    """MAJ:MIN of the whole disk holding `path` (throttles apply to disks, not partitions)."""
    st = os.stat(path)
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    sys_dev = Path("/sys/dev/block") / dev
    if not sys_dev.exists():
        raise SystemExit(f"{path} is on device {dev}, which is not a block device (tmpfs, overlay?): "
                         "put the benchmark cache (SLOWFRAME_BENCH_CACHE) on a real disk")
    if (sys_dev / "partition").exists():
        return (sys_dev.resolve().parent / "dev").read_text().strip()
    return dev


class Throttle:
    """A cgroup whose members read `device` at most `bytes_per_s`; None: no limit."""

    def __init__(self, device: str):
        self.device = device
        self.v1 = (V1_ROOT / "blkio.throttle.read_bps_device").is_file()
        root = V1_ROOT if self.v1 else V2_ROOT
        if not self.v1 and "io" not in (cg_read(root, "cgroup.controllers") or "").split():
            raise SystemExit("no cgroup blkio (v1) or io (v2) controller to throttle reads with")
        self.cgroup = root / CGROUP_NAME
        if self.cgroup.exists():
            cgroup_remove(self.cgroup)
        if not self.v1:
            cg_write(root, "cgroup.subtree_control", "+io")
        self.cgroup.mkdir()

    def set(self, bytes_per_s: float | None) -> None:
        if self.v1:
            cg_write(self.cgroup, "blkio.throttle.read_bps_device", f"{self.device} {int(bytes_per_s or 0)}")
        else:
            cg_write(self.cgroup, "io.max", f"{self.device} rbps={int(bytes_per_s) if bytes_per_s else 'max'}")

    def read_bytes(self) -> int:
        """Bytes the cgroup's members have read from the device so far."""
        name = "blkio.throttle.io_service_bytes" if self.v1 else "io.stat"
        for line in (cg_read(self.cgroup, name) or "").splitlines():
            f = line.split()
            if self.v1 and f[:2] == [self.device, "Read"]:
                return int(f[2])
            if not self.v1 and f and f[0] == self.device:
                return int(dict(x.split("=") for x in f[1:]).get("rbytes", 0))
        return 0

    @property
    def procs(self) -> Path:
        return self.cgroup / "cgroup.procs"

    def remove(self) -> None:
        cgroup_remove(self.cgroup)


def evaluation_bytes(unet: Path, preset: str) -> int:
    """Stored bytes an evaluation reading K/V from the cache needs: the weights of the
    UNet's cached plan (every weight but the cross-attention K/V projections')."""
    from engine.sdxl.unet import UNet

    with UNet.load(unet, preset) as model:     # reads the header only
        return sum(model.store.stored_bytes(n) for n in {n for g in model.plans[True] for n in g})


def overlap(compute_s: float, read_s: float, total_s: float) -> float:
    """The share of the shorter of reading and computing that hid behind the longer."""
    return 1 - (total_s - max(compute_s, read_s)) / min(compute_s, read_s)


def parse_size(text: str) -> tuple[int, int]:
    h, _, w = text.partition("x")
    return int(h), int(w or h)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="128", help="latent size, N or HxW (default 128: 1024x1024 pixels)")
    p.add_argument("--preset", default="rpi-lowmem", help="engine preset (default %(default)s)")
    p.add_argument("--read-ratios", default="0.4,1,2.5",
                   help="read time / compute time per evaluation to throttle the card to (default %(default)s)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of all cases, alternating (default 2)")
    p.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                   help="engine options to compare (each round runs every variant); default: the preset as it is")
    p.add_argument("--no-memory-cgroup", action="store_true", help="run the cases without the 256 MiB memory limit")
    p.add_argument("--unet", type=Path, default=None, metavar="DIR", help="UNet folder (default: the random SDXL UNet)")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("needs root: the card is slowed down with a cgroup")
    h, w = parse_size(args.size)
    ratios = [float(x) for x in args.read_ratios.split(",") if x.strip()]
    unet_full.ensure_weights()
    inputs = unet_full.ensure_inputs(h, w, unet_full.BATCH)
    case_args = argparse.Namespace(unet=args.unet or unet_full.UNET_DIR, repeats=1)
    weights = sorted(Path(case_args.unet).glob("*.safetensors"))
    memory = None
    if not args.no_memory_cgroup:
        why = cgroup_unavailable_reason()
        if why:
            raise SystemExit(f"[card] no 256 MiB memory cgroup: {why} (--no-memory-cgroup runs without one)")
        memory = CGROUP_ROOT / "slowframe-bench-card"
    throttle = Throttle(block_device(weights[0]))
    log(f"[card] throttling reads of {throttle.device} ({weights[0]}) with {throttle.cgroup}"
        + (f"; memory limited by {memory}" if memory else ""))

    variants = [unet_full.parse_overrides(v.split(",")) for v in args.variant] or [{}]
    needed = evaluation_bytes(Path(case_args.unet), args.preset)

    def run(label: str, rate: float | None, overrides: dict) -> dict:
        throttle.set(rate)
        before = throttle.read_bytes()
        if memory:
            cgroup_create(memory)
        try:
            r = unet_full.run_engine_case(
                h, w, unet_full.BATCH, args.preset, overrides, inputs, case_args,
                cgroup_procs=[throttle.procs] + ([memory / "cgroup.procs"] if memory else []), tag=f"-card-{label}",
                where=("" if rate is None else f" reading at {rate / MB:.0f} MB/s") + (" in 256 MiB" if memory else ""))
            st = cgroup_stats(memory) if memory else None
        finally:
            if memory:
                cgroup_remove(memory)
        if st:
            log(f"[card] {label}: {describe_cgroup(st, r['rc'])}")
        if not r.get("completed"):
            raise SystemExit(f"[card] case {label} failed: {r.get('status')}")
        return {"label": label, "variant": overrides, "rate": rate, "s": r["eval_s"], "cpu_s": r["eval_cpu_s"],
                "read_bytes": r["eval_read_bytes"], "device_bytes": throttle.read_bytes() - before,
                "peak_rss": r["mem"]["vmhwm_bytes"], "memory_cgroup": st}

    rows = []
    rates: dict[float, float] = {}
    try:
        for rnd in range(args.rounds):
            for v, overrides in enumerate(variants):
                log(f"[card] round {rnd + 1}/{args.rounds}" + (f", variant {overrides}" if overrides else ""))
                tag = f"-v{v + 1}" if len(variants) > 1 else ""
                free = run("free" + tag, None, overrides)
                rows.append(dict(free, round=rnd + 1, ratio=None))
                for k in ratios:
                    if k not in rates:   # fixed by the first free case (2nd evaluation), then kept
                        rates[k] = needed / (k * free["s"][1])
                    r = run(f"K{k:g}" + tag, rates[k], overrides)
                    read_s = [b / rates[k] for b in r["read_bytes"]]
                    r.update(round=rnd + 1, ratio=k, read_s=read_s, free_s=free["s"],
                             overlap=[overlap(c, rd, t) for c, rd, t in zip(free["s"], read_s, r["s"])])
                    rows.append(r)
    finally:
        throttle.remove()

    out = CACHE / "card-overlap" / f"{h}x{w}-{args.preset}.json"
    write_json(out, {"size": [h, w], "preset": args.preset, "memory_cgroup": bool(memory), "rows": rows})
    table = []
    for r in rows:
        for i, what in enumerate(("K/V computed", "K/V cached")):
            table.append({
                "round": r["round"], "case": r["label"], "evaluation": f"{i + 1} ({what})",
                "card MB/s": "-" if r["rate"] is None else f"{r['rate'] / MB:.0f}",
                "GB read": f"{r['read_bytes'][i] / 1e9:.2f}",
                "reading s": f"{r['read_s'][i]:.1f}" if "read_s" in r else "-", "s": f"{r['s'][i]:.1f}",
                "free s": f"{r['free_s'][i]:.1f}" if "free_s" in r else "-",
                "overlap": f"{r['overlap'][i]:.3f}" if "overlap" in r else "-", "cpu s": f"{r['cpu_s'][i]:.1f}",
                "peak RSS MB": f"{r['peak_rss'] / MB:.0f}",
                "cgroup max MB": f"{r['memory_cgroup']['max_usage_in_bytes'] / MB:.0f}" if r["memory_cgroup"] else "-"})
    print_table(["round", "case", "evaluation", "card MB/s", "GB read", "reading s", "s", "free s", "overlap",
                 "cpu s", "peak RSS MB", "cgroup max MB"], table)
    for overrides in variants:
        for k in ratios:
            got = [x for r in rows if r["ratio"] == k and r["variant"] == overrides for x in r["overlap"]]
            log(f"[card] {overrides or args.preset}, reading {k:g}x the compute time: overlap "
                + ", ".join(f"{x:.3f}" for x in got))
    for r in rows:
        if r["rate"] is not None and r["device_bytes"] < 0.9 * sum(r["read_bytes"]):
            log(f"[card] WARNING: case {r['label']} round {r['round']}: the throttled cgroup read only "
                f"{r['device_bytes'] / 1e9:.2f} GB of the {sum(r['read_bytes']) / 1e9:.2f} GB the process read, "
                "so the throttle did not hold all its reads: its overlap means nothing")
    log(f"[card] results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
