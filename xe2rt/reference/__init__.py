"""numpy references, shared by the tests and the benchmarks. Each computes in float64 from the exact inputs."""
