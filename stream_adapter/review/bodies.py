"""The JSON bodies a reviewer posts over HTTP to decide a call or resolve an unknown outcome.

The review service's API and the HTTP tool server take the same bodies: strict, no extra keys,
and never the reviewer, whose name comes from the credential.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stream_adapter.core.errors import ToolUsageError

__all__ = ["DecisionRequest", "ResolutionRequest", "read_decision", "read_resolution"]


class DecisionRequest(BaseModel):
    """A reviewer's verdict on a pending call; the reviewer is never part of it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    approved: bool
    reason: str | None = Field(default=None, max_length=4096)


class ResolutionRequest(BaseModel):
    """A reviewer's finding about an unknown outcome: did the call run (and with what)?"""

    model_config = ConfigDict(extra="forbid", strict=True)

    ran: bool
    result: Any = None
    reason: str | None = Field(default=None, max_length=4096)


def read_decision(raw: bytes) -> DecisionRequest:
    """The decision in a request body; ToolUsageError (400) when it is not one."""
    try:
        return DecisionRequest.model_validate_json(raw)
    except ValidationError:
        raise ToolUsageError(
            'the body is {"approved": bool, "reason"?: str}; the reviewer comes from the token'
        ) from None


def read_resolution(raw: bytes) -> ResolutionRequest:
    """The resolution in a request body; ToolUsageError (400) when it is not one."""
    try:
        return ResolutionRequest.model_validate_json(raw)
    except ValidationError:
        raise ToolUsageError(
            'the body is {"ran": bool, "result"?: any, "reason"?: str}; '
            "the reviewer comes from the token"
        ) from None
