"""EG509: an external data file (``.ptd``) that cannot be read."""

from __future__ import annotations

from collections.abc import Iterator

from export_guards.pte.context import PteContext
from export_guards.ruleset import Hit, rule


@rule("EG509")
def data_file_invalid(context: PteContext) -> Iterator[Hit]:
    for ptd in context.data_files:
        ptd.entries  # noqa: B018  (reading records the problems)
        yield from (Hit(f"{ptd.name}: {problem}", artifact=ptd.name) for problem in ptd.problems)
        for key, region in ptd.entries:
            if region is not None and not 0 <= region.start <= region.end <= len(ptd.data):
                yield Hit(
                    f"{ptd.name}: named data '{key}' spans bytes {region.start}-{region.end}, past the end ({len(ptd.data)} bytes)",
                    constant=key,
                    region=(region.start, region.size),
                    artifact=ptd.name,
                )
