"""Helpers shared by the test suites, the capture recorder and the benches: throwaway
PostgreSQL clusters (:mod:`support.server`)."""
