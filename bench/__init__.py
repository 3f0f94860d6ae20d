"""overspill's benchmarks: the gateway harness (`bench.gateway`) and the in-process ones (`bench/micro`)."""
