"""The ACLs docs/operations.md documents are the ones the code renders, character for character."""

from __future__ import annotations

import pytest

from stream_adapter.ops.acls import ADMIN_ARGS, Principals, acls, commands, parse_command
from stream_adapter.settings import Settings
from tests.harness import ROOT, documented_acl_lines


def test_the_documented_acls_are_the_rendered_defaults() -> None:
    assert documented_acl_lines() == commands(Settings.model_construct())


def test_rendering_follows_the_settings_names() -> None:
    settings = Settings.for_app("shop", calls_topic="shop-calls")
    lines = commands(settings, Principals(agents="User:bots"))
    assert any("--topic shop-calls" in line and "User:bots" in line for line in lines)
    assert any("--group shop" in line and "User:adapter" in line for line in lines)
    assert all(line.startswith(f"kafka-acls.sh {ADMIN_ARGS} --add") for line in lines)


def test_only_the_review_principal_may_write_decisions() -> None:
    settings = Settings.model_construct()
    writers = [
        line
        for line in commands(settings)
        if f"--topic {settings.decisions_topic}" in line and "Write" in line
    ]
    assert writers and all("User:review" in line for line in writers)
    assert (ROOT / "docs" / "operations.md").exists()


def test_each_documented_line_parses_back_to_the_acl_it_renders() -> None:
    for acl in acls(Settings.model_construct()):
        assert parse_command(acl.command()) == acl
    with pytest.raises(ValueError):
        parse_command("kafka-acls.sh $ADMIN --add --allow-principal User:x --operation All")
    with pytest.raises(ValueError):
        parse_command("kafka-acls.sh $ADMIN --add --deny-principal User:x --topic t")
