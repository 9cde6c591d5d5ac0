"""No import circles (issue 28, item 6): no module of `trainledger` or `costcore` imports,
directly or through others, a module that imports it back.

`lint-imports` checks this inside each package (the `acyclic_siblings` contract in
pyproject.toml); this test checks the whole module graph at once, so a circle through
several features (`budgets/firing.py` → `stores.py` → `ingest/store.py` → back) fails too,
and names it. Imports under `if TYPE_CHECKING:` are not edges (grimp tells them apart, as
`exclude_type_checking_imports` does for lint-imports); imports inside functions are.

Imports under `if TYPE_CHECKING:` still tie modules together for readers and for mypy, so
`test_no_new_typing_only_circle` counts them too: the circles they close are the few listed in
`TYPING_ONLY_ALLOWED`, which may shrink but not grow, and none may pass through the webhooks
package (its formats once did: chat_formats -> formats -> chat_formats, with teams and
people_text; the message types now sit below every format, in `formats/message.py`).
"""

from __future__ import annotations

from collections import deque

import grimp

# The circles closed only by imports under `if TYPE_CHECKING:` that are still allowed (each a
# strongly connected component's modules): a circle found must lie within one of them.
TYPING_ONLY_ALLOWED: tuple[frozenset[str], ...] = (
    frozenset({"trainledger.client.batching", "trainledger.client.spool"}),
)
NO_CIRCLE_THROUGH = ("trainledger.webhooks.",)


def _graph(exclude_type_checking_imports: bool = True) -> dict[str, set[str]]:
    graph = grimp.build_graph(
        "trainledger",
        "costcore",
        exclude_type_checking_imports=exclude_type_checking_imports,
        cache_dir=None,
    )
    modules = set(graph.modules)
    return {m: set(graph.find_modules_directly_imported_by(m)) & modules for m in modules}


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            nxt = next(successors, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _shortest_cycle(edges: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest circle through the component's first module, as `a -> b -> ... -> a`."""
    start, inside = component[0], set(component)
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(edges[node] & inside):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover - an SCC has one


def test_the_finder_names_a_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(edges) == [["a", "b", "c"]]
    assert _shortest_cycle(edges, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_no_module_imports_itself_through_others() -> None:
    edges = _graph()
    circles = [" -> ".join(_shortest_cycle(edges, c)) for c in _circles(edges)]
    assert not circles, "import circles (move what both sides need below them):\n" + "\n".join(
        circles
    )


def test_no_new_typing_only_circle() -> None:
    edges = _graph(exclude_type_checking_imports=False)
    found = _circles(edges)
    new = [c for c in found if not any(set(c) <= allowed for allowed in TYPING_ONLY_ALLOWED)]
    through = [c for c in found if any(m.startswith(NO_CIRCLE_THROUGH) for m in c)]
    named = [
        " -> ".join(_shortest_cycle(edges, c)) for c in new + [c for c in through if c not in new]
    ]
    assert not new and not through, (
        "import circles through type-only imports (put the shared types below both sides):\n"
        + "\n".join(named)
    )
