"""Backend: the executor a host builds once per process and hands to every handler.

``build_backend(store=...)`` builds it from the configured topology (its ``build_executor``
and ``TOOLS``), or from a registry you pass. Handlers take ``backend.executor``;
``record_decision`` and ``resolve_outcome`` take the backend itself as well.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stream_adapter.core.executor import Executor
from stream_adapter.core.tools import ToolNames, ToolRegistry, allow_list

if TYPE_CHECKING:
    from stream_adapter.core.approvals import ApprovalStore

__all__ = ["Backend", "build_backend", "executor_of"]


@dataclass(frozen=True)
class Backend:
    """An executor over an approval store; ``tools`` is the allow-list it runs."""

    executor: Executor

    @property
    def store(self) -> ApprovalStore | None:
        """Where this backend parks calls that need a reviewer."""
        return self.executor.store

    @property
    def origin(self) -> str:
        """Who owns the approvals this backend parks."""
        return self.executor.origin

    @property
    def tools(self) -> frozenset[str] | None:
        """The executor's allow-list (None: every registered tool)."""
        return self.executor.tools


def executor_of(target: Executor | Backend) -> Executor:
    """The executor of a Backend, or target itself when it already is one."""
    if isinstance(target, Backend):
        return target.executor
    if isinstance(target, Executor):
        return target
    raise TypeError(f"expected an Executor or a Backend, got {type(target).__name__}")


def build_backend(
    registry: ToolRegistry | None = None,
    *,
    store: ApprovalStore | None = None,
    tools: ToolNames | None = None,
    origin: str | None = None,
    topology: str | None = None,
) -> Backend:
    """A Backend over store: the registry's tools, or else the topology's.

    Without a registry, the topology module (``topology``, else the ``STREAM_ADAPTER_TOPOLOGY``
    setting) supplies the executor through its ``build_executor(store)``, and its ``TOOLS``
    narrow it unless ``tools`` is given. ``origin`` names who owns the records it parks
    (``"queue"`` unless the topology's executor says otherwise). Build it once per process
    (per container) and keep it.
    """
    if registry is not None:
        return Backend(Executor(registry, store, origin=origin or "queue", tools=tools))
    module = _topology(topology)
    build = getattr(module, "build_executor", None)
    if not callable(build):
        raise TypeError(f"topology {module.__name__!r} has no build_executor(store)")
    built = build(store)
    if not isinstance(built, Executor):
        raise TypeError(f"{module.__name__}.build_executor(store) did not return an Executor")
    narrowed = allow_list(tools if tools is not None else getattr(module, "TOOLS", None))
    if narrowed is not None:
        built.tools = narrowed if built.tools is None else built.tools & narrowed
    if origin is not None:
        built.origin = origin
    return Backend(built)


def _topology(name: str | None) -> Any:
    if name is None:
        from stream_adapter.settings import Settings

        name = Settings().topology
    return importlib.import_module(name)
