"""Benchmarks: one module a measurement, sharing timing.pys harness."""
