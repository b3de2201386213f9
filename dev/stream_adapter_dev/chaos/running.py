"""Which approved calls are running in which worker: the confirm tools' run journal.

In the chaos topology (`topology.py`) the demo's confirm tools append a line to the file
`STREAM_ADAPTER_DEMO_RUNS` names as each run starts, records its effect and ends, with the
process id. A run with a
start and no end in a process that has since died was cut off by that death: the evidence that
a SIGKILL landed on an approved call while its tool ran.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

START, EFFECT, END = "start", "effect", "end"
"""The journal's events (topology.py writes them; importing it would build its app)."""
RUNS_ENV = "STREAM_ADAPTER_DEMO_RUNS"
LATENCY_ENV = "STREAM_ADAPTER_DEMO_TOOL_LATENCY_S"
TOPOLOGY = "stream_adapter_dev.chaos.topology"
"""The topology chaos workers serve: the demo's tools, the confirm ones journalled."""


@dataclass(slots=True)
class ToolRun:
    """One run of a confirm tool, as its journal lines tell it."""

    tool: str
    call_id: str
    run: str
    pid: int
    started_at: float
    effect: bool = False
    ended: bool = False
    cut: bool = False
    """Its process died before it ended (set by `cut_off`)."""


@dataclass(slots=True)
class RunJournal:
    """Reads the journal as it grows; `runs` by run id, in the order they started."""

    path: Path
    runs: dict[str, ToolRun] = field(default_factory=dict)
    _open: dict[str, ToolRun] = field(default_factory=dict)
    """Runs neither ended nor cut off."""
    _offset: int = 0

    def refresh(self) -> None:
        """Read the lines appended since the last refresh (a partial last line waits)."""
        if not self.path.exists():
            return
        with self.path.open("rb") as journal:
            journal.seek(self._offset)
            data = journal.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            if line:
                self._apply(json.loads(line))

    def _apply(self, line: dict[str, object]) -> None:
        run_id = str(line["run"])
        event = line["event"]
        if event == START:
            self.runs[run_id] = self._open[run_id] = ToolRun(
                str(line["tool"]),
                str(line["call_id"]),
                run_id,
                int(str(line["pid"])),
                float(str(line["at"])),
            )
            return
        run = self.runs.get(run_id)
        if run is None:
            return
        if event == EFFECT:
            run.effect = True
        elif event == END:
            run.ended = True
            self._open.pop(run_id, None)

    def running(self, pids: Iterable[int], tool: str | None = None) -> list[ToolRun]:
        """Runs (of tool, when given) started in one of pids and not ended, newest first."""
        wanted = set(pids)
        found = [
            r for r in self._open.values() if r.pid in wanted and (tool is None or r.tool == tool)
        ]
        return sorted(found, key=lambda r: r.started_at, reverse=True)

    def cut_off(self, pid: int) -> list[ToolRun]:
        """The runs of the process pid, now dead, that never ended: marked cut and returned
        (call `refresh` first, so every line it wrote before it died has been read)."""
        cut = self.running([pid])
        for run in cut:
            run.cut = True
            del self._open[run.run]
        return cut
