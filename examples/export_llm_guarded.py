"""ExecuTorch's ``export_llm`` on one of its shipped config files, stock and guarded, side by side.

A small Llama (``PARAMS``) with deterministic weights, written by code to a temporary
checkpoint (no download), goes through ``export_llama`` as the config says (stock), then
through the same builder lowered with the guards (``guarded``); both programs run in
``executorch.runtime`` over decode steps, and their argmax tokens are compared. docs/exporters.md
explains each step.

    python examples/export_llm_guarded.py [llama_xnnpack.yaml] [--no-embedding-quantize] [--layers=N]

(``--no-embedding-quantize`` drops the config's ``embedding_quantize``, whose
``quantized_decomposed::embedding_4bit`` kernel the pip wheel's runtime does not register: the
programs are still compared byte for byte, but only such a program runs here. ``--layers=N``:
the Llama's layers, default 2; each one adds to both lowerings, most of the run.)
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import export_guards as eg  # first: it keeps torch's and torchao's start-up warnings quiet

# isort: split
import torch

from export_guards.quiet import buffer_warning_answered, libraries_quiet, runtime_chatter_dropped

PARAMS = {
    "dim": 128,
    "n_layers": 2,
    "n_heads": 4,
    "n_kv_heads": 2,
    "vocab_size": 256,
    "multiple_of": 32,
    "norm_eps": 1e-5,
}


def llm_config(config_file: str, folder: Path, name: str, embedding_quantize: bool = True):
    from executorch.examples.models import llama
    from executorch.extension.llm.export.config.llm_config import LlmConfig
    from omegaconf import OmegaConf

    shipped = OmegaConf.load(Path(llama.__file__).parent / "config" / config_file)
    config = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(LlmConfig), shipped))
    config.base.params, config.base.checkpoint = str(folder / "params.json"), str(folder / "model.pth")
    config.export.max_seq_length = config.export.max_context_length = 32
    # An output name ending in .pte is used as the path itself (output_dir ignored): a full path.
    config.export.output_dir, config.export.output_name = str(folder), str(folder / name)
    if not embedding_quantize:
        config.quantization.embedding_quantize = None
    return config


def write_model(folder: Path, layers: int = PARAMS["n_layers"]) -> None:
    """``params.json`` (``PARAMS``, with ``layers`` layers) and a checkpoint of deterministic
    weights (``export_llama`` without one leaves its RMSNorm weights uninitialized: two exports
    would differ)."""
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    params = {**PARAMS, "n_layers": layers}
    (folder / "params.json").write_text(json.dumps(params))
    torch.manual_seed(0)
    torch.save(construct_transformer(ModelArgs(**params)).state_dict(), folder / "model.pth")


def stock(config) -> bytes:
    from executorch.examples.models.llama.export_llama_lib import export_llama

    return Path(export_llama(config)).read_bytes()


def guarded(config) -> bytes:
    """``_export_llama``'s XNNPACK lowering (no PT2E quantizer in the shipped XNNPACK configs),
    with the guard passes, its partitioners guarded and the emit passes."""
    from executorch.examples.models.llama.export_llama_lib import _prepare_for_llama_export
    from executorch.extension.llm.export.partitioner_lib import get_xnnpack_partitioner

    builder = _prepare_for_llama_export(config).export()
    builder.run_canonical_optimizations()
    partitioners = [get_xnnpack_partitioner(dynamic_quant_only_partitioner=True)]
    if config.backend.xnnpack.extended_ops:
        partitioners.append(get_xnnpack_partitioner(dynamic_quant_only_partitioner=False))
    partitioners = eg.guard_partitioners(partitioners)
    builder = builder.to_edge_transform_and_lower(
        partitioners, transform_passes=eg.guard_passes(partitioner=partitioners)
    )
    return builder.to_executorch(passes=[*eg.emit_passes()]).export_program.buffer


def decode(pte: bytes, steps: int = 6) -> list[torch.Tensor]:
    """The logits of ``steps`` single-token decode steps, through one loaded method."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(pte)
    method = program.load_method("forward")
    return [
        method.execute([torch.tensor([[(37 * p) % PARAMS["vocab_size"]]]), torch.tensor([p])])[0] for p in range(steps)
    ]


USAGE = "usage: python examples/export_llm_guarded.py [CONFIG.yaml] [--no-embedding-quantize] [--layers=N]"


def layers_of(argv: list[str]) -> int:
    """The ``--layers=N`` given (PARAMS' own without one); a misspelt option or a count that is
    not a whole number of 1 or more stops the script, saying so."""
    for option in argv:
        if option.startswith("--") and option != "--no-embedding-quantize" and not option.startswith("--layers="):
            raise SystemExit(f"{USAGE}\nunknown option {option}")
    given = [a.removeprefix("--layers=") for a in argv if a.startswith("--layers=")]
    if not given:
        return PARAMS["n_layers"]
    if not given[-1].isdigit() or int(given[-1]) < 1:
        raise SystemExit(f"{USAGE}\n--layers takes a whole number of layers, 1 or more (got {given[-1]!r})")
    return int(given[-1])


def main(argv: list[str]) -> None:
    config_file = next((a for a in argv if not a.startswith("--")), "llama_xnnpack.yaml")
    embedding_quantize = "--no-embedding-quantize" not in argv
    layers = layers_of(argv)
    folder = Path(tempfile.mkdtemp())
    write_model(folder, layers)
    # What this script prints is the comparison: export_llama's progress lines and prints, the
    # emitter's warning about the KV cache (it starts at zeros: nothing lost) and the native
    # start-up lines of the tokenizers and the runtime's CPU probe stay off the terminal.
    with libraries_quiet(), buffer_warning_answered(), runtime_chatter_dropped():
        stock_pte = stock(llm_config(config_file, folder, "stock.pte", embedding_quantize))
        guarded_pte = guarded(llm_config(config_file, folder, "guarded.pte", embedding_quantize))
        steps = list(zip(decode(stock_pte), decode(guarded_pte), strict=True)) if not embedding_quantize else []
    same = "byte for byte" if stock_pte == guarded_pte else "different bytes"
    print(f"{config_file}: stock {len(stock_pte):,} bytes, guarded {len(guarded_pte):,} bytes ({same})")
    if embedding_quantize:
        return
    for step, (theirs, ours) in enumerate(steps):
        print(
            f"step {step}: same token {torch.equal(ours.argmax(-1), theirs.argmax(-1))}, max logit difference {(ours - theirs).abs().max().item():.2g}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
