"""The compiled parts, plain C through the CPython C API: the reading core, ``ringtrace.stages._core``, and
the Perfetto records' encoder, ``ringtrace.sinks.perfetto._encode``; the rest of the build is in pyproject.toml.
The core's rooms are ``ringtrace/stages/_core_src/*.c``; both take the constants they share with Python from
``_core_src/tables.h``, which ``ringtrace.stages.core_header`` writes from the Python tables.

``pip install .`` (and ``make``) compiles them with the machine's C compiler.  Without one, or when a
compilation fails, the install still succeeds: one line says so and ringtrace uses its pure-Python path
there (the reference, which ``RINGTRACE_PURE=1`` selects on any machine).
"""

from __future__ import annotations

import os
import sys
from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NOTICE = "ringtrace: the compiled {what} not built ({why}); the pure-Python path will be used"
WHAT = {"ringtrace.stages._core": "reading core", "ringtrace.sinks.perfetto._encode": "Perfetto encoder"}


def _why(err: Exception) -> str:
    text = str(err).strip()
    if text.startswith("Command '["):  # a compiler that ran and failed: its whole command line
        return "the C compiler failed"
    return text.splitlines()[-1] if text else type(err).__name__


class OptionalBuildExt(build_ext):
    """build_ext that never fails the install: a missing compiler or failed compilations are one line.  A module
    that was not built leaves no older build of it behind (in ``build/`` or, ``--inplace``, in the package): the
    install reads on the pure path rather than through a module built from other tables."""

    def run(self) -> None:
        self.failed: dict[str, str] = {}  # what was not built -> why
        self.in_place = self.inplace  # build_ext.run builds in build/ first, then copies in place
        try:
            super().run()
        except Exception as err:  # no compiler at all, or copying in place what was not built
            for what in WHAT.values():  # the compiler's own reason, where build_extension kept one
                self.failed.setdefault(what, _why(err))
        if self.failed:
            what = " and the ".join(self.failed) + (" were" if len(self.failed) > 1 else " was")
            print(NOTICE.format(what=what, why="; ".join(dict.fromkeys(self.failed.values()))), file=sys.stderr)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as err:  # the compiler ran and failed
            self.failed[WHAT.get(ext.name, ext.name)] = _why(err)
            stale = [self.get_ext_fullpath(ext.name)]
            if self.in_place:  # the package is at the top of the tree: its module's path is its file name
                stale.append(self.get_ext_filename(ext.name))
            for path in stale:
                if os.path.exists(path):
                    os.remove(path)


CORE_SRC = "ringtrace/stages/_core_src"
HEADERS = sorted(glob(f"{CORE_SRC}/*.h"))  # core.h (the rooms' shared header) and tables.h (generated)

setup(
    ext_modules=[Extension("ringtrace.stages._core", sorted(glob(f"{CORE_SRC}/*.c")), depends=HEADERS,
                           include_dirs=[CORE_SRC], extra_compile_args=["-O2"]),
                 Extension("ringtrace.sinks.perfetto._encode", ["ringtrace/sinks/perfetto/_encode.c"], depends=HEADERS,
                           include_dirs=[CORE_SRC], extra_compile_args=["-O2"])],
    cmdclass={"build_ext": OptionalBuildExt},
)
