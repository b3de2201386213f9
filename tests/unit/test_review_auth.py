"""Reviewers file, token hashing, session cookies and CSRF tokens of the review service."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from stream_adapter.core.errors import ToolUsageError
from stream_adapter.review.auth import Forbidden, ReviewersFile, Sessions, Unauthenticated


def test_add_prints_a_token_that_verifies_and_stores_only_a_hash(tmp_path: Path) -> None:
    path = tmp_path / "reviewers.json"
    token = ReviewersFile(path).add("ann")
    assert token.startswith("sa1.")
    text = path.read_text()
    assert token not in text and token.split(".")[2] not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ReviewersFile(path).verify(token).name == "ann"


@pytest.mark.parametrize(
    "bad", ["", "sa1", "sa1..x", "sa1.nope.secret", "Bearer x", "sa2.a.b", "sa1.a.b.c"]
)
def test_malformed_or_unknown_tokens_are_refused(tmp_path: Path, bad: str) -> None:
    reviewers = ReviewersFile(tmp_path / "reviewers.json")
    reviewers.add("ann")
    with pytest.raises(Unauthenticated):
        reviewers.verify(bad)


def test_a_token_with_a_known_id_but_wrong_secret_is_refused(tmp_path: Path) -> None:
    reviewers = ReviewersFile(tmp_path / "reviewers.json")
    token = reviewers.add("ann")
    forged = token.rsplit(".", 1)[0] + ".not-the-secret"
    with pytest.raises(Unauthenticated):
        reviewers.verify(forged)


def test_names_are_unique_and_replace_rotates_the_token(tmp_path: Path) -> None:
    reviewers = ReviewersFile(tmp_path / "reviewers.json")
    old = reviewers.add("ann")
    with pytest.raises(ToolUsageError):
        reviewers.add("ann")
    new = reviewers.add("ann", replace=True)
    assert reviewers.verify(new).name == "ann"
    with pytest.raises(Unauthenticated):
        reviewers.verify(old)
    assert [r.name for r in reviewers.reviewers()] == ["ann"]


@pytest.mark.parametrize("name", ["", "a b", "<script>", "x" * 65, "-lead"])
def test_reviewer_names_are_plain(tmp_path: Path, name: str) -> None:
    with pytest.raises(ToolUsageError):
        ReviewersFile(tmp_path / "reviewers.json").add(name)


def test_the_file_is_reread_when_another_process_changes_it(tmp_path: Path) -> None:
    path = tmp_path / "reviewers.json"
    service_view = ReviewersFile(path)
    assert service_view.reviewers() == []
    token = ReviewersFile(path).add("bob")  # e.g. `stream-adapter reviewers add` elsewhere
    assert service_view.verify(token).name == "bob"
    ReviewersFile(path).remove("bob")
    with pytest.raises(Unauthenticated):
        service_view.verify(token)


def _reviewer(tmp_path: Path) -> tuple[ReviewersFile, str]:
    reviewers = ReviewersFile(tmp_path / "reviewers.json")
    token = reviewers.add("ann")
    return reviewers, token


def test_session_cookies_round_trip_and_resist_tampering(tmp_path: Path) -> None:
    reviewers, token = _reviewer(tmp_path)
    sessions = Sessions(b"k" * 32, ttl_s=60)
    session, cookie = sessions.issue(reviewers.verify(token))
    assert sessions.check(cookie) == session
    payload, mac = cookie.split(".")
    for forged in (payload + "." + "0" * 64, payload[:-2] + "." + mac, "", "x", cookie + "0"):
        with pytest.raises(Unauthenticated):
            sessions.check(forged)
    with pytest.raises(Unauthenticated):
        Sessions(b"other" * 8, ttl_s=60).check(cookie)


def test_sessions_expire(tmp_path: Path) -> None:
    reviewers, token = _reviewer(tmp_path)
    sessions = Sessions(b"k" * 32, ttl_s=60)
    session, cookie = sessions.issue(reviewers.verify(token), now=1000.0)
    assert sessions.check(cookie, now=1059.0) == session
    with pytest.raises(Unauthenticated):
        sessions.check(cookie, now=1061.0)


def test_csrf_tokens_are_bound_to_the_session_and_the_login_nonce(tmp_path: Path) -> None:
    reviewers, token = _reviewer(tmp_path)
    sessions = Sessions(b"k" * 32, ttl_s=60)
    one, _ = sessions.issue(reviewers.verify(token))
    two, _ = sessions.issue(reviewers.verify(token))
    sessions.check_csrf(one, sessions.csrf_token(one))
    for bad in ("", "0" * 64, sessions.csrf_token(two)):
        with pytest.raises(Forbidden):
            sessions.check_csrf(one, bad)
    sessions.check_login_csrf("nonce", sessions.login_csrf("nonce"))
    with pytest.raises(Forbidden):
        sessions.check_login_csrf("other", sessions.login_csrf("nonce"))
    with pytest.raises(Forbidden):
        sessions.check_login_csrf("", "")
