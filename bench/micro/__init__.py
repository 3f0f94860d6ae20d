"""The in-process benchmarks (pytest-benchmark): `make bench-micro`, docs/benchmarks.md."""
