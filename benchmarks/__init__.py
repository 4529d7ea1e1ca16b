"""Mnemo's benchmark suite: `python -m benchmarks.run [--quick]`. See benchmarks/README.md."""
