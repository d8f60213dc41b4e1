"""Readers of the files a program ships as: the ``.pte``, its ``.ptd`` files, XNNPACK payloads."""
