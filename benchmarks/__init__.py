"""Benchmarks: scripts that reproduce one figure each and write it as JSON."""
