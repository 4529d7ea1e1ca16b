"""The optional C extensions: the scan core (mnemo/_speedups.c), the file backend's read path
(mnemo/_readpath.c), the write path of a put (mnemo/_writepath.c) and the PostgreSQL backend's checks of
the rows a query reads (mnemo/_pgread.c). Without a compiler, OpenSSL's or zlib's headers the install goes
on without them and Mnemo runs their pure-Python twins (mnemo/storage/file/scan.py, reads.py;
mnemo/chain/codec.py, mnemo/storage/file/framing.py; mnemo/storage/postgres/sql.py)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            f"mnemo.{name}",
            sources=[f"mnemo/{name}.c"],
            depends=["mnemo/_fields.h", "mnemo/_sha256.h"],  # the shared headers: a record built, SHA-256
            libraries=["crypto", "z"],
            extra_compile_args=["-O2", "-std=c99", "-Wall", "-Wextra", "-Wno-unused-parameter"],
            optional=True,
        )
        for name in ("_speedups", "_readpath", "_writepath", "_pgread")
    ]
)
