"""How far a reader walks through the house to follow one call: ``lower_with_guards`` on the
bundled decoder, and ``export-guards lint`` on it (issue 55's "two walks").

The walk is what a reader opens to follow the call: the calls from one export-guards function
to another, in the order they first happen, each (caller, callee) pair once however often it
runs (a loop over constants is read once), as the rooms they enter (a room is a row of
docs/design.md's table: a folder such as ``analysis/``, or a module such as ``pipeline.py``):
each call from one room into another (a call within a room stays in it, and what a module runs
as it is imported is not followed), each such move once. A stay is one entry in that walk; the rooms are
its distinct rooms; a return is a stay in a room visited before (stays - rooms). Fewer returns: a
call that reads top to bottom.

    python benchmarks/walks.py            # both walks, this tree
    python benchmarks/walks.py --list     # and each walk's sequence of rooms
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

ROOM_DEPTH = 1  # a room is a row of docs/design.md's table: a folder (analysis/) or a module (pipeline.py)


def room_of(module: str | None) -> str | None:
    return ".".join(module.split(".")[1 : ROOM_DEPTH + 1]) if module is not None else None


def walk(call: Callable[[], object]) -> list[str]:
    """The rooms ``call`` enters, each (caller, callee) pair of export-guards functions once, merged in a row."""
    rooms: list[str] = []
    seen: set[tuple[object, object]] = set()
    moves: set[tuple[str | None, str]] = set()

    def ours(frame) -> str | None:
        module = frame.f_globals.get("__name__", "") if frame is not None else ""
        # progress lines and the flatbuffer readers flatc generates from a backend's schema
        # (pte/reader/flatc.py names them export_guards._generated.*) are not rooms a reader opens
        theirs = module == "export_guards.progress" or module.startswith("export_guards._generated")
        return module if module.startswith("export_guards") and not theirs else None

    def profile(frame, event, arg):
        if event != "call" or ours(frame) is None or frame.f_code.co_name == "<module>":
            return
        caller = frame.f_back
        while caller is not None and ours(caller) is None:  # through torch's and ExecuTorch's frames
            caller = caller.f_back
        if caller is not None and caller.f_code.co_name == "<module>":
            return  # a module's import is not the call's walk
        pair = (caller.f_code if caller is not None else None, frame.f_code)
        if pair in seen:
            return
        seen.add(pair)
        move = (room_of(ours(caller)) if caller is not None else None, room_of(ours(frame)))
        if move[0] != move[1] and move not in moves:  # a call within a room stays in it
            moves.add(move)
            if not rooms or rooms[-1] != move[1]:
                rooms.append(move[1])

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return rooms


def lower_decoder() -> None:
    import torch

    import decoder  # examples/decoder.py
    from export_guards.pipeline import lower_with_guards

    model, inputs = decoder.model()[:2]
    lower_with_guards(torch.export.export(model, tuple(inputs)))


def lint_decoder() -> None:
    from export_guards.cli import main

    with tempfile.TemporaryDirectory() as folder:
        main(["lint", str(ROOT / "examples" / "decoder.py") + ":model", "--pte", str(Path(folder) / "decoder.pte")])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print each walk's rooms in order")
    listed = parser.parse_args().list
    lower_decoder()  # warm: imports and first-use caches are not the walk
    for name, call in (("lower_with_guards", lower_decoder), ("export-guards lint", lint_decoder)):
        rooms = walk(call)
        print(f"{name}: {len(rooms)} stays in {len(set(rooms))} rooms, {len(rooms) - len(set(rooms))} returns")
        if listed:
            print("  " + " > ".join(r.removeprefix("export_guards.") for r in rooms))


if __name__ == "__main__":
    main()
