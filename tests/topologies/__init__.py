"""Topologies that only tests run."""
