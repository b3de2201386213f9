"""Each app id and approvals topic gets its own tables folder under DATA_DIR."""

from __future__ import annotations

from pathlib import Path

from stream_adapter.settings import Settings


def test_apps_and_topics_never_share_a_folder(tmp_path: Path) -> None:
    base = Settings(data_dir=tmp_path)
    folders = {
        Settings.model_validate({**base.model_dump(), **changes}).tables_dir
        for changes in (
            {},
            {"app_id": "other"},
            {"approvals_topic": "other"},
            {"app_id": "a/b"},
            {"app_id": "a%2fb"},
            {"app_id": ".."},
            {"app_id": "a b"},
            {"app_id": "a_b"},
        )
    }
    assert len(folders) == 8
    for folder in folders:
        assert folder.parent.parent == tmp_path  # one level per name, never out of DATA_DIR
