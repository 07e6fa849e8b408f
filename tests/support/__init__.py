"""Helpers of the test suites: throwaway PostgreSQL clusters (:mod:`support.server`),
Spark servers, workloads, the worker programs the kill tests start, the golden-capture
recorder (:mod:`support.capture`), which tests run on Spark Connect
(:mod:`support.spark_modes`) and what a suite needs besides PostgreSQL
(:mod:`support.requires`). The benches use :mod:`support.server` and
:mod:`support.synthetic`."""
