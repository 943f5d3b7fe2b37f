"""Support code shared by the tests and the benchmarks: real servers, ports, lake checks."""
