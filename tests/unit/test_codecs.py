"""Every codec decodes in a plain install, and a broken one stops a command with one line."""

from __future__ import annotations

import aiokafka.codec
import pytest
from click.testing import CliRunner

from stream_adapter.cli import cli
from stream_adapter.commands import ExitCode
from stream_adapter.core.errors import CodecUnavailable
from stream_adapter.kafka import codecs


@pytest.mark.parametrize("codec", codecs.CODECS)
def test_each_codec_round_trips_a_record_batch(codec: str) -> None:
    codecs.roundtrip(codec)


def test_an_unusable_codec_is_named_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aiokafka.codec, "cramjam", None)  # as an install without cramjam
    codecs.check_codecs.cache_clear()
    with pytest.raises(CodecUnavailable) as caught:
        codecs.check_codecs()
    assert "snappy" in caught.value.detail
    assert "\n" not in caught.value.detail
    codecs.check_codecs.cache_clear()


def test_the_worker_fails_fast_on_an_unusable_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aiokafka.codec, "cramjam", None)
    codecs.check_codecs.cache_clear()
    # No broker answers here: the codec check comes before any connection.
    result = CliRunner().invoke(cli, ["--broker", "127.0.0.1:1", "worker"])
    codecs.check_codecs.cache_clear()
    assert result.exit_code == ExitCode.CONFIG, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "CodecUnavailable" in lines[0] and "snappy" in lines[0]
    assert "Traceback" not in result.output


def test_an_unknown_codec_name_is_refused() -> None:
    with pytest.raises(CodecUnavailable):
        codecs.roundtrip("brotli")
