"""`python -m stream_adapter` is the `stream-adapter` command."""

from stream_adapter.cli import main

main()
