"""`slowframe generate` loads only what generating needs: every module imported stays
resident through the UNet, on a 512 MB Pi."""

from __future__ import annotations

import subprocess
import sys

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
