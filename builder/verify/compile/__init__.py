"""Trusted parent: content-addressed, sandboxed builds of candidate sources, alone or shared."""
