"""Read a trapdev tensor's data_ptr() from the host, as the emitter does: this must crash."""

import ctypes

import torch

from export_guards.testing import load_trapdev

x = torch.arange(8, dtype=torch.float32).to(load_trapdev())
print("copied back:", torch.equal(x.cpu(), torch.arange(8, dtype=torch.float32)), flush=True)
ctypes.string_at(x.data_ptr(), 4)
print("read the device pointer without crashing", flush=True)
