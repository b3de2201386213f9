"""The least-privilege Kafka ACLs of a deployment: one principal each for agents, the worker
(adapter) and the review service, named after the settings' topics and app id.

They are rendered as `kafka-acls` commands (Kafka's own tool); docs/operations.md shows the
rendering for the default names, and the secured test broker applies exactly those lines.
The topics themselves are created by an administrator (`stream-adapter topics create` with
admin credentials); the worker may create only the internal topics named after its app id.
"""

from __future__ import annotations

from dataclasses import dataclass

from stream_adapter.settings import Settings

ADMIN_ARGS = "$ADMIN"
"""Stands for `--bootstrap-server HOST:PORT --command-config admin.properties` in the lines."""


@dataclass(frozen=True, slots=True)
class Principals:
    """Who is who: the Kafka principal of each role."""

    agents: str = "User:agents"
    adapter: str = "User:adapter"
    review: str = "User:review"


@dataclass(frozen=True, slots=True)
class Acl:
    """Allow `principal` the `operations` on one resource (a literal name or a prefix)."""

    principal: str
    operations: tuple[str, ...]
    resource: str  # topic | group | transactional-id
    name: str
    prefixed: bool = False

    def command(self) -> str:
        """This ACL as one `kafka-acls.sh` command line."""
        ops = " ".join(f"--operation {op}" for op in self.operations)
        pattern = " --resource-pattern-type prefixed" if self.prefixed else ""
        return (
            f"kafka-acls.sh {ADMIN_ARGS} --add --allow-principal {self.principal} {ops}"
            f" --{self.resource} {self.name}{pattern}"
        )

    def args(self, admin_args: list[str]) -> list[str]:
        """The command's arguments after the tool's name, with $ADMIN replaced."""
        words = self.command().split()[1:]
        at = words.index(ADMIN_ARGS)
        return [*words[:at], *admin_args, *words[at + 1 :]]


def parse_command(line: str) -> Acl:
    """The ACL a `command()` line grants (its inverse); ValueError for any other line."""
    words = line.split()
    if words[:3] != ["kafka-acls.sh", ADMIN_ARGS, "--add"]:
        raise ValueError(f"not an ACL line: {line!r}")
    principal, operations, resource, name, prefixed = "", [], "", "", False
    pairs = iter(words[3:])
    for flag in pairs:
        value = next(pairs, "")
        if flag == "--allow-principal":
            principal = value
        elif flag == "--operation":
            operations.append(value)
        elif flag in ("--topic", "--group", "--transactional-id"):
            resource, name = flag[2:], value
        elif flag == "--resource-pattern-type" and value == "prefixed":
            prefixed = True
        else:
            raise ValueError(f"unexpected {flag} {value} in {line!r}")
    if not (principal and operations and resource and name):
        raise ValueError(f"incomplete ACL line: {line!r}")
    acl = Acl(principal, tuple(operations), resource, name, prefixed)
    if acl.command() != " ".join(words):
        raise ValueError(f"not in the rendered form: {line!r}")
    return acl


def acls(settings: Settings, principals: Principals | None = None) -> list[Acl]:
    """Every ACL the three roles need, and nothing more."""
    who = principals or Principals()
    s = settings
    app = s.app_id
    read, write = ("Read", "Describe"), ("Write", "Describe")
    return [
        # Agents send calls and read replies (in a group named agents-*, if they use one);
        # transactional agents use transactional ids agents-*.
        Acl(who.agents, write, "topic", s.calls_topic),
        Acl(who.agents, read, "topic", s.replies_topic),
        Acl(who.agents, ("Read",), "group", "agents-", prefixed=True),
        Acl(who.agents, write, "transactional-id", "agents-", prefixed=True),
        # The worker reads calls and decisions, writes replies, dead letters and its table;
        # its group, its transactional ids and its internal topics are named after the app id.
        Acl(who.adapter, read, "topic", s.calls_topic),
        Acl(who.adapter, read, "topic", s.decisions_topic),
        Acl(who.adapter, write, "topic", s.replies_topic),
        Acl(who.adapter, write, "topic", s.dlq_topic),
        Acl(who.adapter, ("Read", "Write", "Describe"), "topic", s.approvals_topic),
        Acl(
            who.adapter,
            ("Read", "Write", "Describe", "Create"),
            "topic",
            f"{app}-",
            prefixed=True,
        ),
        Acl(who.adapter, ("Read", "Describe"), "group", app),
        Acl(who.adapter, write, "transactional-id", f"{app}-", prefixed=True),
        # The review service reads the approvals table and writes decisions.
        Acl(who.review, read, "topic", s.approvals_topic),
        Acl(who.review, write, "topic", s.decisions_topic),
    ]


def commands(settings: Settings, principals: Principals | None = None) -> list[str]:
    """The ACLs as `kafka-acls.sh` command lines, one per resource."""
    return [acl.command() for acl in acls(settings, principals)]
