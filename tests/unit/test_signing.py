"""Decision signing: unsigned decisions are refused unless explicitly allowed, keys can come
from a file that run.sh and compose generate once, and no secret reaches a repr."""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from stream_adapter.core.signing import (
    KEY_ID_HEADER,
    DecisionKeys,
    SignatureError,
    announce,
    ensure_keys_file,
)
from stream_adapter.settings import Settings
from tests.harness import ROOT

VALUE = b'{"approval_id":"appr_1","approved":true,"reviewer":"ann"}'
SECRET = "s3cr3t-decision-key-canary-0123456789"


def test_unsigned_decisions_are_refused_by_default() -> None:
    for keys in (DecisionKeys.parse(""), DecisionKeys.parse(f"k1:{SECRET}")):
        with pytest.raises(SignatureError) as refused:
            keys.verify(VALUE, {})
        assert refused.value.reason == "unsigned"


def test_the_allow_setting_admits_unsigned_but_still_checks_signatures() -> None:
    keys = DecisionKeys.parse(f"k1:{SECRET}", allow_unsigned=True)
    keys.verify(VALUE, {})
    keys.verify(VALUE, keys.sign(VALUE))
    forged = DecisionKeys.parse("k1:guess").sign(VALUE)
    with pytest.raises(SignatureError, match="bad signature"):
        keys.verify(VALUE, forged)
    with pytest.raises(SignatureError, match="unsigned"):
        keys.verify(VALUE, {KEY_ID_HEADER: b"k1"})  # half a signature is no signature
    with pytest.raises(SignatureError, match="unknown key id"):
        DecisionKeys.parse("", allow_unsigned=True).verify(VALUE, forged)


def test_settings_reach_the_keys(tmp_path: Path) -> None:
    path = ensure_keys_file(tmp_path / "keys" / "decision-keys")
    from_file = DecisionKeys.from_settings(Settings(decision_keys_file=path))
    assert from_file.required and not from_file.allow_unsigned
    from_file.verify(VALUE, from_file.sign(VALUE))
    inline = DecisionKeys.from_settings(
        Settings(decision_keys=f"k9:{SECRET}", decision_keys_file=path)
    )
    assert list(inline.keys) == ["k9"]  # DECISION_KEYS wins over the file
    allowed = DecisionKeys.from_settings(Settings(allow_unsigned_decisions=True))
    assert allowed.allow_unsigned and not allowed.required
    with pytest.raises(ValueError, match="decision keys file"):
        DecisionKeys.from_settings(Settings(decision_keys_file=tmp_path / "missing"))


def test_the_keys_file_is_made_once_and_private(tmp_path: Path) -> None:
    path = ensure_keys_file(tmp_path / "decision-keys")
    first = path.read_text()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    key_id, _, secret = first.strip().partition(":")
    assert key_id and len(secret) >= 64
    assert ensure_keys_file(path).read_text() == first  # kept: decisions in flight still verify


def test_no_secret_in_reprs_or_child_environments(tmp_path: Path) -> None:
    keys = DecisionKeys.parse(f"k1:{SECRET}")
    assert SECRET not in repr(keys) and "k1" in repr(keys)
    settings = Settings(decision_keys=f"k1:{SECRET}", session_secret=SECRET)
    assert SECRET not in repr(settings) and SECRET not in str(settings)
    env = Settings().to_env()
    assert "STREAM_ADAPTER_DECISION_KEYS_FILE" not in env  # unset stays unset, never "None"


def test_start_warnings(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="stream_adapter")
    announce(DecisionKeys.parse(f"k1:{SECRET}"))
    assert not caplog.records
    announce(DecisionKeys.parse(""), decides=False)  # no confirm tools: nothing to say
    assert not caplog.records
    announce(DecisionKeys.parse(""))
    announce(DecisionKeys.parse("", allow_unsigned=True))
    events = [(r.levelno, getattr(r, "event", None)) for r in caplog.records]
    assert events == [
        (logging.WARNING, "no_decision_keys"),
        (logging.WARNING, "unsigned_decisions_allowed"),
    ]


def test_run_sh_gives_the_worker_and_the_review_service_one_generated_key(tmp_path: Path) -> None:
    """scripts/run.sh with stand-ins for pip and the CLI that record what each command saw."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "run.sh", tmp_path / "scripts" / "run.sh")
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    seen = tmp_path / "seen.jsonl"
    _script(
        bin_dir / "python",
        f'[ "$1 $2" = "-m pip" ] && exit 0\nexec {sys.executable} "$@"',
    )
    record = (
        "import json, os, sys; "
        "path = os.environ.get('STREAM_ADAPTER_DECISION_KEYS_FILE'); "
        "line = {'command': sys.argv[1:], 'file': path, "
        "'keys': open(path).read() if path else None, "
        "'allow': os.environ.get('STREAM_ADAPTER_ALLOW_UNSIGNED_DECISIONS')}; "
        f"open({str(seen)!r}, 'a').write(json.dumps(line) + chr(10))"
    )
    # The worker stand-in waits (up to 30 s) for the review stand-in started in the background.
    wait_review = (
        f"for _ in $(seq 600); do grep -qF '[\"review\"]' {seen} 2>/dev/null && break; "
        "sleep 0.05; done"
    )
    _script(
        bin_dir / "stream-adapter",
        f'[ "$1" = worker ] && {{ {wait_review}; }}\n'
        f'{sys.executable} -c "{record}" "$@"\n[ "$1" = reviewers ] && echo token || true',
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("STREAM_ADAPTER_") and key != "KAFKA_BOOTSTRAP_SERVERS"
    }
    env |= {
        "VENV": str(tmp_path / "venv"),
        "STREAM_ADAPTER_BROKER": "127.0.0.1:1",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        ["bash", str(tmp_path / "scripts" / "run.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in seen.read_text().splitlines()]
    started = {line["command"][0]: line for line in lines if line["command"][0] in RUNS}
    assert set(started) == RUNS, lines
    files = {line["file"] for line in started.values()}
    assert files == {str(tmp_path / ".data" / "decision-keys")}
    keys = DecisionKeys.parse(started["worker"]["keys"].strip())
    assert keys.required and started["review"]["keys"] == started["worker"]["keys"]
    assert all(line["allow"] is None for line in started.values())


RUNS = {"review", "worker"}


def _script(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body + "\n")
    path.chmod(0o755)
