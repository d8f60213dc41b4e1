"""The delegate backend ids that some build of ExecuTorch's runtime registers, and the CMake option that builds each in (EG521)."""

from __future__ import annotations

import difflib
from types import MappingProxyType

__all__ = ["KNOWN_BACKEND_IDS", "closest_backend_id"]

# The id a delegate carries is its BackendDetails subclass's name (executorch/backends/…), which
# the backend's C++ side registers under the same name. None: no CMake option known here.
KNOWN_BACKEND_IDS: MappingProxyType[str, str | None] = MappingProxyType(
    {
        "XnnpackBackend": "EXECUTORCH_BUILD_XNNPACK",
        "VulkanBackend": "EXECUTORCH_BUILD_VULKAN",  # the WebGPU runtime registers this id too
        "CoreMLBackend": "EXECUTORCH_BUILD_COREML",
        "MPSBackend": "EXECUTORCH_BUILD_MPS",
        "MetalBackend": "EXECUTORCH_BUILD_METAL",
        "MLXBackend": "EXECUTORCH_BUILD_MLX",
        "CoreAIBackend": None,
        "QnnBackend": "EXECUTORCH_BUILD_QNN",
        "CudaBackend": "EXECUTORCH_BUILD_CUDA",
        "EthosUBackend": "EXECUTORCH_BUILD_ARM_BAREMETAL",
        "VgfBackend": "EXECUTORCH_BUILD_VGF",
        "NeuropilotBackend": "EXECUTORCH_BUILD_NEURON",
        "OpenvinoBackend": "EXECUTORCH_BUILD_OPENVINO",
        "EnnBackend": "EXECUTORCH_BUILD_ENN",
        "NeutronBackend": "EXECUTORCH_BUILD_NXP_NEUTRON",
        "NativeBackend": None,
    }
)
"""Every backend id some ExecuTorch build registers -> the CMake option that builds it in. An id
outside it (a misspelling, a renamed backend) loads in no build: the runtime fails with
``NotFound``. TOSABackend is absent on purpose: it is an ahead-of-time stage of the Arm
backends, which no runtime registers."""


def closest_backend_id(backend_id: str) -> str | None:
    """The known id ``backend_id`` most likely misspells (``xnnpackbackend``, ``XnnpackBackendV2``), or None."""
    folded = {known.casefold(): known for known in KNOWN_BACKEND_IDS}
    if backend_id.casefold() in folded:
        return folded[backend_id.casefold()]
    close = difflib.get_close_matches(backend_id.casefold(), list(folded), n=1, cutoff=0.75)
    return folded[close[0]] if close else None
