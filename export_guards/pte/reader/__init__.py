"""Readers of the files a program ships as: the ``.pte``, its ``.ptd`` files, XNNPACK payloads."""

from export_guards.pte.reader.deferred_numpy import import_flatbuffers

import_flatbuffers()  # before any reader imports it: numpy only where something uses it
