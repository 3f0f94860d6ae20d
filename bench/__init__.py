"""overspill's benchmarks: the gateway harness (`bench.gateway`), the in-process ones
(`bench/micro`). docs/benchmarks.md says how to run each and what it measures."""
