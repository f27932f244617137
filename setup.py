"""Builds the optional C modules: engine.kernels._ckernels (engine/kernels/build.py) and
frame.display._cdither (frame/display/dither_build.py).

Metadata lives in pyproject.toml. Without a working C compiler the install still
succeeds: engine.kernels and frame.display.dither then use their numpy twins (same
results, slower).
"""

import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed C build into a warning instead of a failed install."""

    @staticmethod
    def _warn(exc):
        msg = " ".join(f"{type(exc).__name__}: {exc}".split())
        if len(msg) > 200:  # a failed compile quotes its whole command line
            msg = msg[:90] + " ... " + msg[-90:]
        print(f"WARNING slowframe: C kernels not built ({msg}), using the numpy fallback", file=sys.stderr, flush=True)

    def run(self):
        try:
            super().run()
        except Exception as exc:  # e.g. no usable compiler at all (DistutilsPlatformError)
            self._warn(exc)
            self.extensions = []  # nothing to list in get_outputs() or copy in place

    def build_extensions(self):
        built = []
        for ext in self.extensions:
            try:
                self.build_extension(ext)
            except Exception as exc:  # CompileError, LinkError, missing Python.h, CC=false ...
                self._warn(exc)
            else:
                built.append(ext)
        self.extensions = built  # so the editable/in-place copy skips what failed


setup(
    cmdclass={"build_ext": OptionalBuildExt},
    cffi_modules=["engine/kernels/build.py:ffibuilder", "frame/display/dither_build.py:ffibuilder"],
)
