"""The optional C scan core (mnemo/_speedups.c). Without a compiler, OpenSSL's or zlib's headers the
install goes on without it and Mnemo runs the pure-Python twin (mnemo/storage/file/scan.py)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "mnemo._speedups",
            sources=["mnemo/_speedups.c"],
            libraries=["crypto", "z"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
    ]
)
