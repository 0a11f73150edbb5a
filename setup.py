"""Build kqlite; the cffi C helpers are optional: if they fail to build, the
install still succeeds and kqlite uses the pure-Python twins."""

from setuptools import setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    def run(self):
        try:
            super().run()
        except Exception as exc:  # no compiler, no headers, ...
            print(f"kqlite: C helpers not built ({exc}); using the pure-Python twins")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"kqlite: C helpers not built ({exc}); using the pure-Python twins")


setup(
    cffi_modules=["csrc/build_native.py:ffibuilder"],
    cmdclass={"build_ext": OptionalBuildExt},
)
