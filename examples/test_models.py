"""A model author's tests with the export-guards pytest plugin (installed with the package).

Run: ``.venv/bin/python -m pytest examples/`` (add ``--eg-trapdev`` to also export from the
test accelerator, ``--eg-artifacts out/failing`` to keep failing programs and reports).
"""

from __future__ import annotations

import pytest

import decoder
import device_constants
import segmentation


@pytest.mark.parametrize(
    "api", ["plain", "spectral_norm", "parametrizations.spectral_norm", "parametrizations.weight_norm", "mixed"]
)
def test_decoder_runs_on_xnnpack_and_matches_eager(api, check_export, assert_delegated):
    model, inputs = decoder.model(api)
    # GroupNorm and GELU in XNNPACK differ from eager by about 2e-5 on this decoder.
    result = check_export(model, inputs, atol=1e-4, rtol=1e-4)
    assert_delegated(result)  # every conv on XNNPACK, reparametrized or not
    assert result.delegation.count("convolution") == (9, 9)


@pytest.mark.export_guards(placement="copy")
def test_linear_relu_exports_from_any_device(eg_device, check_export):
    model, inputs = device_constants.model(eg_device)
    check_export(model, inputs, extra_inputs=[(inputs[0] * -1,)])


def test_segmentation_runs_on_xnnpack_and_matches_eager(check_export, assert_delegated):
    model, inputs = segmentation.model(size=40)  # padded to 48 by the model, as 400 is to 400
    assert_delegated(check_export(model, inputs, atol=1e-3, rtol=1e-3))  # every compute op on XNNPACK
