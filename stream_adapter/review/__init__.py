"""The review service: a live view of the approvals table, reviewers, a web page and an API.

`view` reads the compacted approvals topic; `decide` writes (signed) decisions; `auth` holds
reviewers, sessions and CSRF; `pages` renders HTML; `web` wires the routes; `commands` is the CLI.
"""
