"""Host recipes for the core: tested, documented examples (see docs/hosts.md)."""
