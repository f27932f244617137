"""Soak test of the frame: a real `slowframe run` under random disturbance for as long as you like.

    python3 bench/soak.py --seconds 1800 [--seed N]

Prints what was done (button commands, socket requests, config edits, damaged history files,
worker and daemon SIGKILLs, disk-full periods) and every broken invariant; tests/soak.py says
which. The state folder is a 48 MB tmpfs when run as root (for the disk-full periods).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from small_disk import small_disk  # noqa: E402
from soak import Soak, undisturbed  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--compare", type=int, default=10, help="history pictures to compare with an undisturbed run")
    args = parser.parse_args()
    from engine.sdxl.random_model import write_random_model

    with tempfile.TemporaryDirectory(prefix="slowframe-soak-") as folder:
        root = Path(folder)
        model = write_random_model(root / "model")
        state = root / "state"
        with small_disk(state, "48m") as mounted:
            soak = Soak(root, model, state, seed=args.seed, disk_full=mounted)
            soak.run(args.seconds)
            counts = soak.check(args.compare, undisturbed(model))
    print(f"soak, seed {args.seed}: {counts.summary()}")
    for failure in counts.failures:
        print(f"  BROKEN: {failure}")
    return 1 if counts.failures else 0


if __name__ == "__main__":
    sys.exit(main())
