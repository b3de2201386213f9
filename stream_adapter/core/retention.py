"""How long settled approval records are kept unless configured otherwise.

Its own module so that the settings (whose default it is) and the approval rules (which
export it) both take it without importing each other.
"""

from __future__ import annotations

__all__ = ["DEFAULT_SETTLED_RETENTION_S"]

DEFAULT_SETTLED_RETENTION_S = 14 * 86400.0
"""Two weeks: longer than the broker's default topic retention (7 days), so a call or decision
redelivered from its topic always finds its record."""
