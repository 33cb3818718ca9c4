"""The compiled reading core, ``ringtrace.stages._core`` (plain C through the CPython C API); the
rest of the build is in pyproject.toml.

``pip install .`` (and ``make``) compiles it with the machine's C compiler.  Without one, or when the
compilation fails, the install still succeeds: one line says so and ringtrace reads with its
pure-Python path (the reference, which ``RINGTRACE_PURE=1`` selects on any machine).
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NOTICE = "ringtrace: the compiled reading core was not built ({why}); the pure-Python path will be used"


class OptionalBuildExt(build_ext):
    """build_ext that never fails the install: a missing compiler or a failed compilation is one line."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as err:  # no compiler at all (distutils raises its own error types)
            print(NOTICE.format(why=str(err).strip() or type(err).__name__), file=sys.stderr)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as err:  # the compiler ran and failed
            print(NOTICE.format(why=str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__),
                  file=sys.stderr)


setup(
    ext_modules=[Extension("ringtrace.stages._core", ["ringtrace/stages/_core.c"], extra_compile_args=["-O2"])],
    cmdclass={"build_ext": OptionalBuildExt},
)
