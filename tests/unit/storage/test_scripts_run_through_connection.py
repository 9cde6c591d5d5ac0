"""Every store runs its registered scripts through the connection (`Connection.run_script`,
`Connection.replicated`, or the ingest lane), never by calling the script object itself: on a
cluster, the connection loads a script on its key's node in the same round trip, which a
promoted replica (an empty script cache) needs; redis-py's own NOSCRIPT path loads it on every
master, and fails when any one of them is down."""

from __future__ import annotations

import re
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[3] / "service"
REGISTERED = re.compile(r"self\.(\w+)\s*=\s*[\w.]*register_script\(")
CALLED_WITH_KEYS = re.compile(r"\b(\w+)\(\s*keys=")


def test_no_store_calls_a_registered_script_itself() -> None:
    registered: dict[Path, set[str]] = {}
    for path in sorted(SERVICE.rglob("*.py")):
        if "storage" in path.relative_to(SERVICE).parts:
            continue
        text = path.read_text()
        names = set(REGISTERED.findall(text))
        if names:
            registered[path] = names
        called = [
            f"{path.relative_to(SERVICE.parent)}: self.{name}("
            for name in sorted(names)
            if re.search(rf"self\.{name}\(", text)
        ]
        called += [
            f"{path.relative_to(SERVICE.parent)}: {m.group(0)}"
            for m in CALLED_WITH_KEYS.finditer(text)
            if m.group(1) in {"script", *names} or m.group(1).startswith("_")
        ]
        assert not called, "run it with self.conn.run_script(script, keys, args):\n" + "\n".join(
            called
        )
    # The check above looked at the stores' scripts: as many as the stores register.
    assert sum(len(n) for n in registered.values()) >= 19, registered
