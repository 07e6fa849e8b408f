"""Chaos runs: seeded workloads and faults, long, outside `make test` (`make chaos`)."""
