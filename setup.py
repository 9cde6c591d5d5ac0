"""Build hook for the compiled pricing kernel and ingest pass; metadata lives in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension("costcore._kernel", ["costcore/_kernel.pyx"], extra_compile_args=["-O3"]),
            Extension("costcore._columns", ["costcore/_columns.pyx"], extra_compile_args=["-O3"]),
        ],
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False},
    ),
)
