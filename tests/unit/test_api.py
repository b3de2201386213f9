"""The package's public API: __all__ is sorted, complete and resolvable."""

from __future__ import annotations

import importlib
import inspect

import grimp

import stream_adapter

CORE_MODULES = [
    "core.approvals",
    "core.budget",
    "core.envelope",
    "core.errors",
    "core.executor",
    "core.ids",
    "core.logs",
    "core.replies",
    "core.runners",
    "core.tools",
    "hosts.backend",
    "hosts.handler",
    "hosts.stores",
    "stream.loopwatch",
]
# Public in their module, deliberately not re-exported at the top level.
MODULE_LEVEL_ONLY = {
    # The credential errors of the review service, the HTTP servers and PushVerifier: in the
    # one hierarchy of errors.py, imported from there (or review.auth), not the package.
    "Forbidden",
    "TokenChecksBusy",
    # The commands' errors (exit codes 6, 8 and 5): raised by the CLI, not by the library.
    "ConfigError",
    "NotPending",
    "TopicMissing",
    "TooManyFailures",
    "Unauthenticated",
    "check_run_over",
    "run_limit_s",
    "DEBUG",
    "ERROR",
    "INFO",
    "WARNING",
    "SAFE_FIELDS",
    "event",
    "log",
    "utc_now",
    "JSONFormatter",
    "TextFormatter",
    "MAX_ID_CHARS",
    "MAX_RESULT_BYTES",
    "MAX_DECISION_BYTES",
    "Step",
    "executor_of",
    "apply_decision",
    "begin_run",
    "rerun",
    "run_age_s",
    "instant",
    "log_expired",
    "rerun_after",
    "give_up",
    "apply_resolution",
    "same_resolution",
    "same_call",
    "fingerprint",
    "park_once",
    "legacy_approval_id",
    "parse_reviewer_message",
    "this_process",
    "MAX_RUNS",
    "finish",
    "new_record",
    "next_step",
    "settled_reply",
    "DEFAULT_SETTLED_RETENTION_S",
    "SETTLED_STATES",
    "expire",
    "expiry",
    "expiry_due",
    "retention_due",
    "settled_at",
    "denial",
    "approval_id_for",
    "delivery_text",
    "derive_call_id",
    "derive_ids",
    "derive_run_id",
    "fresh_id",
    "kafka_message_id",
    "ok_reply",
    "pending_reply",
    "already_done_reply",
    "error_reply_body",
    "default_runner",
    "allow_list",
    "escape",
    "text_value",
    "Budget",
    "check",
    "reserve",
    "time_budget",
    "LAG_BUCKETS_S",
    "NOT_A_TOOL",
    "LoopWatch",
    "executor_codes",
    "tool_codes",
}
CONTRACT_NAMES = {
    "MAX_ENVELOPE_BYTES",
    "Envelope",
    "parse_envelope",
    "handle_envelope",
    "Reply",
    "AdapterError",
    "ToolUsageError",
    "ToolNotFound",
    "ApprovalNotFound",
    "ApprovalDenied",
    "ToolTimeout",
    "ToolFailed",
    "error_reply",
    "record_decision",
    "resolve_outcome",
    "Runner",
    "LoopRunner",
    "RunSync",
    "run_sync",
    "LoopLocal",
    "Executor",
    "ToolRegistry",
    "ApprovalStore",
    "MemoryApprovalStore",
    "SQLiteApprovalStore",
    "Backend",
    "build_backend",
}


def test_all_is_sorted_and_resolves() -> None:
    names = stream_adapter.__all__
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))  # ruff's RUF022 order
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(stream_adapter, name) is not None


def test_spec_names_are_exported() -> None:
    assert set(stream_adapter.__all__) >= CONTRACT_NAMES


def test_every_public_core_name_is_exported_or_deliberately_module_level() -> None:
    missing = []
    for module_name in CORE_MODULES:
        module = importlib.import_module(f"stream_adapter.{module_name}")
        for name in getattr(module, "__all__", []):
            assert hasattr(module, name), f"{module_name}.{name} in __all__ but undefined"
            if name not in stream_adapter.__all__ and name not in MODULE_LEVEL_ONLY:
                missing.append(f"{module_name}.{name}")
        for name, value in vars(module).items():
            defined_here = getattr(value, "__module__", None) == module.__name__
            if (
                not name.startswith("_")
                and defined_here
                and (inspect.isclass(value) or inspect.isfunction(value))
            ):
                assert name in module.__all__, f"{module_name}.{name} missing from its __all__"
    assert not missing, missing


def test_no_broker_imports_in_the_core() -> None:
    for module_name in [*CORE_MODULES, "core._json"]:
        source = inspect.getsource(importlib.import_module(f"stream_adapter.{module_name}"))
        for banned in ("import faust", "import aiokafka", "from faust", "from aiokafka"):
            assert banned not in source, (module_name, banned)


def test_the_settings_import_nothing_that_imports_them_back() -> None:
    """Every part of the package reads the settings: nothing they import may import them."""
    graph = grimp.build_graph("stream_adapter")
    upstream = graph.find_upstream_modules("stream_adapter.settings")
    cycles = {
        module: graph.find_shortest_chain(importer=module, imported="stream_adapter.settings")
        for module in upstream
    }
    assert {module: chain for module, chain in cycles.items() if chain} == {}


def test_approvals_still_names_the_retention_default_and_the_package_the_stores() -> None:
    """docs/core.md: the stores are importable from the package (`approvals` holds the state
    machine, not the stores)."""
    import stream_adapter
    from stream_adapter import settings
    from stream_adapter.core import approvals
    from stream_adapter.hosts import stores

    assert approvals.DEFAULT_SETTLED_RETENTION_S == 14 * 86400.0
    assert settings.Settings.model_fields["settled_retention_s"].default == (
        approvals.DEFAULT_SETTLED_RETENTION_S
    )
    assert stream_adapter.MemoryApprovalStore is stores.MemoryApprovalStore
    assert stream_adapter.SQLiteApprovalStore is stores.SQLiteApprovalStore
    assert not hasattr(approvals, "MemoryApprovalStore")


def _import_cycles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The cycles of a directed graph (one per back edge a depth-first walk meets)."""
    graph: dict[str, set[str]] = {}
    for importer, imported in edges:
        graph.setdefault(importer, set()).add(imported)
    found: list[list[str]] = []
    state: dict[str, int] = {}

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node, [node])
    return found


def test_the_import_map_has_no_cycle_between_modules_or_between_layers() -> None:
    """Modules import one another without a cycle, and so do the package's layers (core/,
    hosts/, kafka/, client/, mcp/, stream/, review/, ops/, commands/, settings, cli)."""
    graph = grimp.build_graph("stream_adapter")

    def layer(module: str) -> str:
        return ".".join(module.split(".")[:2])

    modules: set[tuple[str, str]] = set()
    layers: set[tuple[str, str]] = set()
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            if not imported.startswith("stream_adapter.") or not importer.startswith(
                "stream_adapter."
            ):
                continue  # the package's own __init__ re-exports every layer's names
            modules.add((importer, imported))
            if layer(importer) != layer(imported):
                layers.add((layer(importer), layer(imported)))
    assert ("stream_adapter.ops", "stream_adapter.core") in layers  # the map is not empty
    assert _import_cycles(layers) == []
    assert _import_cycles(modules) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _import_cycles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == [
        ["a", "b", "c", "a"]
    ]
