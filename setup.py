"""Build hook for the compiled pricing kernel and ingest pass; metadata lives in pyproject.toml."""

from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

# The import name is the product's (`import trainledger`); the code lives in `service/`, the
# folder the design card fixes, mapped onto that name here.
PACKAGES = ["trainledger", *(f"trainledger.{name}" for name in find_packages("service"))]

setup(
    packages=[*PACKAGES, "costcore"],
    package_dir={"trainledger": "service"},
    ext_modules=cythonize(
        [
            Extension("costcore._kernel", ["costcore/_kernel.pyx"], extra_compile_args=["-O3"]),
            Extension("costcore._columns", ["costcore/_columns.pyx"], extra_compile_args=["-O3"]),
        ],
        compiler_directives={"language_level": "3", "boundscheck": False, "wraparound": False},
    ),
)
