"""`from stream_adapter import *` works without the optional extras; a shared store whose
extra is missing raises a clear ImportError when it is used, not when the package is imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.harness import ROOT

EXTRAS = {
    "redis": "RedisApprovalStore",
    "sqlalchemy": "SQLApprovalStore",
    "aiobotocore": "DynamoDBApprovalStore",
}
EXTRA_NAMES = {"redis": "redis", "sqlalchemy": "sql", "aiobotocore": "dynamodb"}


def run_without(blocked: list[str], body: str) -> subprocess.CompletedProcess[str]:
    """body in a fresh interpreter where the blocked top-level packages cannot be imported."""
    prelude = "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(body)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("blocked", [["redis"], ["sqlalchemy"], ["aiobotocore"], list(EXTRAS)])
@pytest.mark.parametrize("module", ["stream_adapter", "stream_adapter.hosts.stores"])
def test_star_import_without_extras(blocked: list[str], module: str) -> None:
    done = run_without(
        blocked,
        f"""
        from {module} import *
        import {module} as package
        missing = sorted(n for n in package.__all__ if n not in globals())
        assert not missing, missing
        print("ok")
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize("package, store", sorted(EXTRAS.items()))
def test_a_store_without_its_extra_says_what_to_install(package: str, store: str) -> None:
    done = run_without(
        [package],
        f"""
        from stream_adapter import {store}, MemoryApprovalStore
        import stream_adapter
        assert stream_adapter.{store} is {store}
        assert not isinstance(MemoryApprovalStore(), {store})
        try:
            {store}("redis://localhost:6379/0")
        except ImportError as exc:
            print(exc)
        """,
    )
    assert done.returncode == 0, done.stderr
    extra = EXTRA_NAMES[package]
    assert done.stdout.strip() == (
        f"{store} needs the {extra!r} extra: pip install 'stream-adapter[{extra}]'"
    )


def test_settings_and_build_app_load_on_first_use() -> None:
    """`import stream_adapter` brings in neither Faust, the Kafka client nor the settings;
    `Settings` and `build_app` from the package are the modules' own."""
    done = run_without(
        [],
        """
        import sys
        import stream_adapter
        heavy = ("faust", "mode", "aiokafka", "pydantic_settings", "stream_adapter.stream")
        print(sorted(m for m in heavy if m in sys.modules))
        from stream_adapter import Settings, build_app
        from stream_adapter.settings import Settings as settings_class
        from stream_adapter.stream.app import build_app as app_builder
        print(Settings is settings_class, build_app is app_builder, "faust" in sys.modules)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "True True True"]
