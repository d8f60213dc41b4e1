"""Every code export-guards can report, in one table: code, name, default severity, summary,
fix and stage. ``rules``, ``explain``, ``--select`` / ``--ignore``, per-code severities and the
SARIF renderer all read it. Imports neither torch nor ExecuTorch.

A rule's check lives with its subject (``linter/rules/``, ``pte/rules/``) and is bound to its
entry here by ``@rule(code)``; a guard that reports what it did (a copy, a fold) uses its entry's
code with stage ``action``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from export_guards.report import Severity
from export_guards.ruleset.rule import Check, Rule

__all__ = ["CATALOG", "DEFAULT_OFF", "RETIRED", "rule"]

_REEXPORT = "Re-export the model and write the file again; if it was copied, check the copy is complete."
_NOTHING_TO_DO = "Nothing to do: this reports what a guard did."

_RULES = (
    Rule(
        "EG001",
        "rule-failed",
        Severity.ERROR,
        "A rule failed on its input, so its findings are missing; every other rule still ran.",
        "On a .pte file, the file is malformed where that rule reads it: re-export it. On a model, "
        "report the failure to export-guards with the model; meanwhile --ignore the rule that "
        "failed.",
        "engine",
    ),
    Rule(
        "EG002",
        "step-failed",
        Severity.ERROR,
        "A step of the export (building the model, torch.export, lowering, writing) failed, so "
        "there is no program to report on: the finding names the step, the innermost cause and "
        "the user's line.",
        "Fix the cause at the line named; run the command with -v for the full traceback.",
        "step",
    ),
    Rule(
        "EG003",
        "unused-noqa",
        Severity.WARNING,
        "A # noqa comment on a line of the model's source suppressed nothing in this run: no "
        "finding of the codes it names (of any code, for a bare # noqa) points at that line. Off "
        "by default: select it by name (--extend-select EG003).",
        "Remove the comment, or the codes it names that no longer apply.",
        "engine",
    ),
    Rule(
        "EG101",
        "constant-on-device",
        Severity.ERROR,
        "A constant lives in device (non-CPU) memory: the emitter or a delegate would segfault reading it.",
        "move the model and its example inputs to the CPU before torch.export (model.to('cpu')), "
        "or apply guard_constant_placement(exported_program, policy='copy') to the torch.export "
        "program before to_edge / to_edge_transform_and_lower. If a backend that reads device "
        "memory itself (the CUDA backend) takes these constants, guard the partitioners instead: "
        "partitioner=guard_partitioners([...]) with guard_passes(partitioner=partitioner)",
        "program",
    ),
    Rule(
        "EG102",
        "constant-without-data",
        Severity.ERROR,
        "A constant has no data (meta device, fake tensor, null pointer): there are no bytes to export.",
        "give the constant real data before export: load the weights (for example "
        "model.load_state_dict(state_dict, assign=True)) or materialise the module with "
        "module.to_empty(device='cpu') and initialise it; a meta or fake tensor has no bytes to "
        "write into the program, and copying cannot create them",
        "program",
    ),
    Rule(
        "EG103",
        "constant-copied",
        Severity.INFO,
        "The placement guard's 'copy' policy copied a constant from device memory to the host.",
        _NOTHING_TO_DO + " To export without the copy, move the model to the CPU before torch.export.",
        "action",
        done=("constant copied to the host", "constants copied to the host"),
    ),
    Rule(
        "EG104",
        "device-decomposition-kept",
        Severity.WARNING,
        "The 'copy' policy copied a program that to_edge had already decomposed on the device: "
        "scaled_dot_product_attention keeps the device's decomposition, which can differ from "
        "the CPU's, so the program is not necessarily the CPU export's.",
        "copy before to_edge: guard_constant_placement(program, policy='copy') on the torch.export "
        "program, lower_with_guards(..., config=Settings(placement='copy')), a recipe, or "
        "guard_passes(config=Settings(placement='copy'), partitioner=guard_partitioners([...])), whose partitioners "
        "copy before to_edge_transform_and_lower decomposes (executorch 1.5)",
        "action",
        done=("copy kept a device's decomposition", "copies kept a device's decomposition"),
    ),
    Rule(
        "EG201",
        "constant-folded",
        Severity.INFO,
        "A computation on constants only was folded into one static parameter.",
        _NOTHING_TO_DO + " The program holds the folded weight instead of the computation.",
        "action",
        done=("constant folded", "constants folded"),
    ),
    Rule(
        "EG202",
        "parametrization-folded",
        Severity.INFO,
        "fold_parametrizations replaced a reparametrized weight by a plain parameter.",
        _NOTHING_TO_DO + " The module holds the weight that its eval-mode forward computed.",
        "action",
        done=("reparametrized weight folded", "reparametrized weights folded"),
    ),
    Rule(
        "EG203",
        "fold-declined",
        Severity.INFO,
        "A computation on constants only was left in the program: folding it would neither make "
        "the written program smaller (its instructions, planned results and constants counted) nor "
        "give a delegate a static weight, or its growth is over the fold's budget for the whole program.",
        "Nothing to do if the program is fine as it is. To fold it anyway, raise the budget (inf "
        "folds every computation on constants): fold-max-growth in [tool.export-guards], "
        "--fold-max-growth, or Settings(fold_max_growth=...) in Python.",
        "action",
        done=("fold declined as not worth it (EG203)", "folds declined as not worth it (EG203)"),
    ),
    Rule(
        "EG210",
        "foldable-weight",
        Severity.WARNING,
        "A conv / linear / matmul weight is computed at run time from constants only: XNNPACK will not delegate it.",
        "Turn the fold on (guard_passes() in transform_passes; the command without --no-fold), or "
        "call export_guards.fold.fold_constants(program) on the torch.export program.",
        "program",
    ),
    Rule(
        "EG211",
        "input-dependent-weight",
        Severity.WARNING,
        "A conv / linear / matmul weight depends on a user input: XNNPACK will not delegate it.",
        "Compute the weight from parameters only, or accept that the op runs in the portable "
        "kernels (much slower on device).",
        "program",
    ),
    Rule(
        "EG212",
        "reparametrization-leftover",
        Severity.WARNING,
        "A weight is still reparametrized (spectral_norm, weight_norm, parametrize): its state "
        "ships instead of the weight.",
        "Turn the fold on (guard_passes(); the command without --no-fold), or call "
        "fold_parametrizations(model) before export.",
        "program",
    ),
    Rule(
        "EG301",
        "train-mode-dropout",
        Severity.ERROR,
        "Dropout runs in training mode: the exported program drops activations at random.",
        "Call model.eval() before torch.export.",
        "program",
    ),
    Rule(
        "EG302",
        "train-mode-batch-norm",
        Severity.ERROR,
        "Batch norm runs in training mode: ExecuTorch cannot lower it (it is not core ATen), and "
        "it would normalise with each batch's statistics, not the learned ones.",
        "Call model.eval() before torch.export.",
        "program",
    ),
    Rule(
        "EG303",
        "random-op",
        Severity.WARNING,
        "A random op: the program's outputs differ from run to run, and from eager.",
        "Remove the random op from the inference path, or pass the noise in as an input.",
        "program",
    ),
    Rule(
        "EG304",
        "float64",
        Severity.WARNING,
        "A float64 tensor: most delegates do not take it, and mobile CPUs compute it slowly.",
        "Use float32: model.float(), and no .double() / dtype=torch.float64 in forward.",
        "program",
    ),
    Rule(
        "EG305",
        "parameter-mutated",
        Severity.ERROR,
        "The program writes a parameter in place: ExecuTorch treats parameters as read-only constants.",
        "Register the tensor as a buffer (register_buffer) if it is state, or compute a new "
        "tensor instead of writing in place.",
        "program",
    ),
    Rule(
        "EG307",
        "layer-never-runs",
        Severity.INFO,
        "A layer whose forward never runs, so the program never reads its parameters: a layer "
        "built and never called is often a bug (ExecuTorch does not write its parameters).",
        "If the layer should run, call it in forward; if not, delete it from the module.",
        "program",
    ),
    Rule(
        "EG308",
        "buffer-initial-value-dropped",
        Severity.ERROR,
        "A buffer the program writes in place starts from a value other than zeros that changes "
        "what it computes, and to_executorch writes only its shape and dtype: the program starts "
        "it from zeros, so its outputs differ from eager (to_executorch warns only in Python). A "
        "value the program overwrites or masks (a KV cache left over from an eager call) is no finding.",
        "Mask the read: have each call write what it reads of the buffer first, or read only what it wrote "
        "(a KV cache under its causal mask); or start the buffer at zeros. Last, only when the program must "
        'start from this value: to_executorch(ExecutorchBackendConfig(passes=[keep_initial_values("<buffer>")])), '
        "with keep_initial_values from export_guards, which bakes the value into the program (a stale cache ships in it).",
        "program",
    ),
    Rule(
        "EG309",
        "input-mutated-in-place",
        Severity.WARNING,
        "The model writes one of its inputs in place, so the method returns the written input "
        "as an extra output, before the model's own: an app that reads output 0 reads the wrong "
        "tensor.",
        "Write a copy instead: x = x.clone() before the in-place op, or its out-of-place form "
        "(torch.relu(x), not relu(x, inplace=True); x + 1, not x.add_(1)).",
        "program",
    ),
    Rule(
        "EG310",
        "fixed-input-shapes",
        Severity.INFO,
        "Each method input's shape, dtype and dim order, where every dimension is fixed: the "
        'runtime refuses another shape ("Attempted to resize a static tensor") and reads '
        "another dim order's bytes as this one's.",
        "Where a batch or sequence dimension should vary, export with dynamic_shapes "
        "(torch.export.Dim): a factory's third item, or check_export(..., dynamic_shapes=...); give "
        "the method tensors of the stated dim order.",
        "program",
    ),
    Rule(
        "EG401",
        "compute-not-delegated",
        Severity.WARNING,
        "A conv / linear / matmul was left in the portable graph: it runs in the slow portable kernels.",
        "Change what the partitioner's reason names (a dtype, a shape, an argument the delegate "
        "does not take), or accept the portable kernel for this op.",
        "partitioned",
    ),
    Rule(
        "EG402",
        "delegation-coverage",
        Severity.INFO,
        "How much of the program the delegates run, stated whenever a partitioner was asked "
        "for: the compute ops delegated, and every kernel left to the runtime by name (a buffer's "
        "write-back counted, a view that becomes a view not).",
        "See EG401 for each compute op left out and EG403 for each other op.",
        "partitioned",
    ),
    Rule(
        "EG403",
        "op-not-delegated",
        Severity.INFO,
        "An op other than a conv / linear / matmul was left outside every delegate: it runs "
        "on the runtime's own kernels, which must have it (EG521 says when they do not).",
        "Where the partitioner's reason names something you can change (a dtype, a shape, an "
        "argument), change it; else keep the op portable, or rewrite it with ops the delegate "
        "takes.",
        "partitioned",
    ),
    Rule(
        "EG404",
        "constant-stored-twice",
        Severity.INFO,
        "A constant is read both by a delegate, from its own copy in its data (as XNNPACK keeps "
        "every weight it takes), and by ops outside the delegate, from the program's (a tied "
        "embedding and output head: the head on XNNPACK, the embedding on the runtime's kernels). "
        "Where both copies hold the same bytes, every guarded flow's program stores them once, where "
        "stock ExecuTorch stores them twice (info); where the delegate's copy differs (quantized "
        "for it), the program holds both: a warning that states the bytes.",
        "Same bytes: nothing to do (the pass-list flow stores them once with "
        "export_guards.program.store_once). Other bytes: leave the weight as the delegate takes it "
        "unchanged (a tied head unquantized) so that one copy serves both, or accept both copies.",
        "partitioned",
    ),
    Rule(
        "EG405",
        "delegate-computes-wrong",
        Severity.WARNING,
        "A guard kept an op off a delegate that computes it wrong in the installed ExecuTorch "
        "(a known, reported bug): the op runs on the runtime's portable kernels, which compute "
        "it right, and more slowly than a delegate would.",
        "Nothing to do for correct numbers. For the delegate's speed, use a form it computes "
        "right (for a weight-only quantized linear on XNNPACK: torchao's "
        "Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, "
        "weight_granularity=PerAxis(0)), 8da8w, or weight_dtype=torch.int4, 8da4w: the weight as "
        "small, the activations quantized as it runs), or upgrade ExecuTorch once the report "
        "named is fixed; to accept the portable kernels, ignore EG405.",
        "action",
        done=("op kept off a delegate that computes it wrong", "ops kept off a delegate that computes them wrong"),
    ),
    Rule(
        "EG406",
        "control-flow-output-copied",
        Severity.WARNING,
        "A guard gave a torch.cond result bytes of its own (emit_passes()): the result is read "
        "after another branch may have run, and a program written without the guard keeps it in "
        "the branch's memory, which that branch overwrites: wrong values with no error (EG518 in "
        "the written program; ExecuTorch issue 21490).",
        "Nothing to do where the guards write the program (lower_with_guards, export-guards "
        "lint). Where you write it yourself, keep the guard in: "
        "to_executorch(ExecutorchBackendConfig(passes=eg.emit_passes())), then "
        "eg.check_pte(pte) reports no EG518; to accept the copy, ignore EG406.",
        "action",
        done=("torch.cond result given bytes of its own", "torch.cond results given bytes of their own"),
    ),
    Rule(
        "EG407",
        "int8-dynamic-linear-rewritten",
        Severity.INFO,
        "A guard rewrote a linear that torchao's Int8DynamicActivationInt8WeightConfig quantized, "
        "whose aten._int_mm to_edge rejects (not core ATen), into the dynamically quantized linear "
        "this ExecuTorch computes (the activation quantized and dequantized, the int8 weight "
        "dequantized, linear: the form 8da8w exports): XNNPACK delegates it, the portable kernels "
        "run it otherwise, and the weight stays int8.",
        "Nothing to do: the program computes the quantized model's linear. Where you lower "
        "yourself, run the step that rewrites it: program, report = "
        "eg.fold_non_core_constants(program) before to_edge_transform_and_lower.",
        "action",
        done=("int8 dynamic linear rewritten", "int8 dynamic linears rewritten"),
    ),
    Rule(
        "EG408",
        "quantized-embedding-kernel",
        Severity.WARNING,
        "A guard ran an embedding of a torchao-quantized table (IntxWeightOnlyConfig on an "
        "nn.Embedding) on ExecuTorch's quantized embedding kernel (quantized_decomposed::"
        "embedding_byte, embedding_4bit or embedding_2bit): no kernel runs torchao's "
        "dequantize_affine, so a stock lowering cannot write the program; the program keeps the "
        "quantized table and needs a runtime that links ExecuTorch's quantized kernels.",
        "Nothing to do where the runtime links ExecuTorch's quantized kernels: in Python, "
        "executorch.runtime once `import executorch.kernels.quantized` has run (export-guards' "
        "runs do it), ExecuTorch's llama runner; a C++ runtime of your own links quantized_ops_lib "
        "(EXECUTORCH_BUILD_KERNELS_QUANTIZED=ON), else the program does not load (EG521). To "
        "accept the kernel, ignore EG408.",
        "action",
        done=("embedding put on a quantized embedding kernel", "embeddings put on a quantized embedding kernel"),
    ),
    Rule(
        "EG501",
        "pte-header",
        Severity.ERROR,
        "The file is not a whole ExecuTorch program: its identifier or extended header is wrong.",
        _REEXPORT,
        "pte",
    ),
    Rule(
        "EG502",
        "pte-unparsable",
        Severity.ERROR,
        "ExecuTorch's deserializer cannot read the program flatbuffer, or it has no method.",
        _REEXPORT,
        "pte",
    ),
    Rule(
        "EG503",
        "segment-out-of-bounds",
        Severity.ERROR,
        "A segment, or a constant inside the constant segment, lies outside the file, or two "
        "segments overlap (other than named data stored once at a constant's bytes).",
        _REEXPORT,
        "pte",
    ),
    Rule(
        "EG504",
        "misaligned-data",
        Severity.ERROR,
        "Constant or delegate data is not aligned to 16 bytes, which kernels and delegates assume.",
        "Re-export with ExecuTorch's default segment and tensor alignment (ExecutorchBackendConfig).",
        "pte",
    ),
    Rule(
        "EG505",
        "tensor-data-invalid",
        Severity.ERROR,
        "A tensor's constant buffer or memory-plan slot is missing or smaller than its shape and dtype need.",
        _REEXPORT,
        "pte",
    ),
    Rule(
        "EG506",
        "delegate-data-invalid",
        Severity.ERROR,
        "A delegate's processed data is missing, empty, out of bounds or cannot be decoded, its "
        "backend id is empty, or it is an XNNPACK payload under another backend's id.",
        _REEXPORT,
        "pte",
    ),
    Rule(
        "EG507",
        "named-data-invalid",
        Severity.ERROR,
        "A named-data entry has an empty or repeated key, or no data.",
        _REEXPORT,
        "pte",
    ),
    Rule(
        "EG508",
        "named-data-unresolved",
        Severity.ERROR,
        "A key that a delegate or an external tensor uses is not in the program nor in a given "
        "data file, or holds fewer bytes than the tensor needs.",
        "Pass the external data files with --data (in Python, data_files=); if a key is missing "
        "from them, export the program and its .ptd files together again.",
        "pte",
    ),
    Rule(
        "EG509",
        "data-file-invalid",
        Severity.ERROR,
        "An external data file (.ptd) has a wrong identifier, an invalid header, an undecodable "
        "flatbuffer, or entries outside the file.",
        "Write the .ptd files again with the program (ExecutorchProgramManager.write_tensor_data_to_file).",
        "pte",
    ),
    Rule(
        "EG510",
        "not-reproducible",
        Severity.ERROR,
        "Exporting the same model twice gives different bytes, so on-device caches keyed by the "
        "program's named data (XNNPACK's packed weights) miss on every update.",
        "Make the export deterministic: seed random initialisation (torch.manual_seed) or load "
        "the weights, avoid set and dict orders that vary between runs, and keep names stable.",
        "reproducible",
    ),
    Rule(
        "EG511",
        "runtime-smoke-failed",
        Severity.ERROR,
        "Loading the program in executorch.runtime, or running a method once, crashed, hung or "
        "failed (export-guards lint runs forward on the example inputs, and at each dynamic "
        "dimension's bounds for a dynamic export; check --runtime on made-up ones, or on --inputs: a failure on "
        "made-up integers, which may index past what the program holds, is a warning). A kernel that refused its call is named, with the runtime's reason and "
        "the line of the model that made the op, where the lint knows it.",
        "Where a kernel refused its call, change what the runtime's reason names at that line "
        "(an argument the kernel does not take, a rank, a layout), or lower that op into a "
        "delegate that takes it; else run `export-guards check` without --runtime to find a "
        "structural cause.",
        "runtime",
    ),
    Rule(
        "EG512",
        "instruction-invalid",
        Severity.ERROR,
        "An instruction uses a value, operator or delegate that does not exist, or passes an "
        "operator a value of a kind its schema does not take; or a method lists a value that "
        "does not exist, an input twice, or a list as an input or output.",
        _REEXPORT,
        "pte",
    ),
    Rule(
        "EG513",
        "xnnpack-shared-conv-weights",
        Severity.WARNING,
        "Several XNNPACK convolutions read the same filter and bias named data (byte-identical "
        "weights): ExecuTorch 1.0.0 to 1.2.0 runtimes built with the XNNPACK weights cache crash "
        "loading the program (SIGSEGV in XNNWeightsCache::look_up_or_insert).",
        "Ship with an ExecuTorch runtime of 1.3.0 or later (the fix, pytorch/executorch#18295); on "
        "1.0 to 1.2, build the runtime with EXECUTORCH_XNNPACK_ENABLE_WEIGHT_CACHE=OFF. Re-exporting "
        "does not help: the keys are hashes of the weights' bytes.",
        "pte",
    ),
    Rule(
        "EG514",
        "delegate-call-mismatch",
        Severity.ERROR,
        "A delegate call disagrees with the XNNPACK graph it runs: fewer arguments than the graph "
        "binds (the runtime reads past the argument list), or an argument that is not a tensor, or "
        "whose dtype or shape is not the graph's value's (the runtime does not compare them).",
        _REEXPORT,
        "pte",
    ),
    Rule(
        "EG515",
        "xnnpack-graph-invalid",
        Severity.ERROR,
        "An XNNPACK graph is inconsistent in a way its runtime does not check: external values "
        "without an external id, out of range or shared, flags the runtime rejects, a value id "
        "defined twice, a node that reads a value that no node writes, an external input no node "
        "reads, or a bias that is not one value per output channel.",
        _REEXPORT,
        "pte",
    ),
    Rule(
        "EG516",
        "dim-order-invalid",
        Severity.ERROR,
        "A tensor's dim order is not a permutation of its dimensions: ExecuTorch 1.2 and later "
        "reject the program at load; earlier runtimes compute wrong strides.",
        _REEXPORT,
        "pte",
    ),
    Rule(
        "EG517",
        "value-read-before-written",
        Severity.ERROR,
        "An instruction reads an arena tensor before any instruction writes it, or a method "
        "returns one that nothing writes: it reads whatever the arena holds (the runtime does not "
        "check the order of instructions).",
        _REEXPORT,
        "pte",
    ),
    Rule(
        "EG518",
        "arena-overlap",
        Severity.ERROR,
        "Two tensors that are alive at the same time share bytes of a memory-planned arena, so "
        "one overwrites the other (the runtime does not check the memory plan).",
        _REEXPORT,
        "pte",
    ),
    Rule(
        "EG519",
        "kernel-call-inconsistent",
        Severity.ERROR,
        "An operator call's tensors disagree with what the operator computes from them: an out "
        "tensor of another shape or of a dtype the result cannot be cast to, or inputs the "
        "operator refuses together (the kernel rejects the call or computes wrongly).",
        _REEXPORT,
        "pte",
    ),
    Rule(
        "EG520",
        "compute-on-portable-kernels",
        Severity.WARNING,
        "A method with no delegate runs its convolutions and matrix products on ExecuTorch's "
        "portable kernels, reference implementations far slower than a delegate's.",
        "Lower with a partitioner: to_edge_transform_and_lower(program, partitioner="
        "[XnnpackPartitioner()]), as export-guards lint does; if the target has no delegate, "
        "ignore EG520.",
        "pte",
    ),
    Rule(
        "EG521",
        "runtime-lacks-kernel",
        Severity.ERROR,
        "The program calls an operator kernel, or a delegate backend, that the runtime it is "
        "checked against does not have (executorch.runtime here with --runtime and in "
        "export-guards lint, or the kernel list given with --kernels): loading the method fails "
        "there (OperatorMissing, or no backend). Checked only against such a runtime: the file "
        "itself may be sound. A backend that another build of ExecuTorch has is a warning; a "
        "backend id that no ExecuTorch build registers (misspelt) is an error.",
        "For a kernel: lower the op into a delegate that takes it (EG403 says why the partitioner "
        "did not), register a kernel for it in the runtime (a custom op library), or build the "
        "runtime with it (selective build: add the operator to its list, and lint with --kernels "
        "that list); for a backend, build the runtime with it. Or export for what the runtime has "
        "(the same ExecuTorch version, its partitioners).",
        "pte",
    ),
    Rule(
        "EG522",
        "runtime-output-mismatch",
        Severity.ERROR,
        "export-guards lint ran the written program on the example inputs (and, for a dynamic "
        "export, at each dynamic dimension's bounds) in executorch.runtime, and an output differs from eager beyond the tolerance of its dtype (float32: 1e-3 "
        "relative, and 1e-4 of the output's largest value; float16 and bfloat16 looser; a "
        "quantized program against its quantized reference, a tenth of its largest value; integers "
        "and booleans exactly). The finding gives the largest difference and where.",
        "Look for code that runs otherwise under torch.export (a branch on "
        "torch.compiler.is_exporting(), Python state read once when traced; at a bound only, code "
        "that reads a size otherwise than the export traced it); else find the op "
        "that computes differently: lint with --backend portable to tell a delegate's result "
        "from the runtime's kernels', compare intermediate values with ExecuTorch's Inspector, "
        "and report a wrong result to ExecuTorch with the model.",
        "runtime",
    ),
    Rule(
        "EG523",
        "named-data-hash-mismatch",
        Severity.ERROR,
        "A named-data entry whose key is the SHA-256 of its content (XNNPACK's weights) no "
        "longer hashes to its key: the bytes changed after export (a damaged download or copy). "
        "The runtime does not check it, and a weights cache keyed by that name (XNNPACK's) "
        "keeps the damage across launches.",
        "Write the program (and its .ptd files) again from the export, or copy it again from "
        "the source; clear the device's XNNPACK weights cache if a damaged copy was run.",
        "pte",
    ),
    Rule(
        "EG524",
        "known-wrong-delegation",
        Severity.ERROR,
        "A delegate of the written program computes an op wrong, a known and reported bug of the "
        "installed ExecuTorch (the list EG405 keeps off the delegate when exporting): for a "
        "weight-only quantized linear on XNNPACK (torchao's Int8WeightOnlyConfig, "
        "IntxWeightOnlyConfig), the delegate multiplies by the weight's integers, not its values. "
        "The finding names the delegate, the op, the upstream report and the release.",
        "Export with the guard passes before the partitioners, which keep the op on the portable "
        "kernels (EG405): partitioner = eg.guard_partitioners([XnnpackPartitioner()]), then "
        "to_edge_transform_and_lower(ep, transform_passes=eg.guard_passes(partitioner=partitioner), "
        "partitioner=partitioner) (or transform_passes=eg.guard_passes() beside your own "
        "partitioners), or eg.lower_with_guards(ep); or, for the delegate's speed, quantize in a "
        "form it computes right (torchao's Int8DynamicActivationIntxWeightConfig, 8da4w or 8da8w).",
        "pte",
    ),
    Rule(
        "EG525",
        "kernel-dtype-refused",
        Severity.ERROR,
        "A method calls a portable kernel with tensors of dtypes that executorch.runtime's kernel "
        "has no path for (log_softmax on float64): the runtime fails the call (0x12, the kernel's "
        "dtype switch found no case), which only a run shows. What each kernel takes was found by "
        "running it in every dtype (kernel_dtypes.json, per ExecuTorch version); a call whose "
        "dtypes no probe made is not judged.",
        "Compute in a dtype the kernel takes: cast to one before the op (x.float()) and back after "
        "if needed; or lower the op into a delegate that takes the dtype.",
        "pte",
    ),
    Rule(
        "EG526",
        "out-too-small-for-result",
        Severity.ERROR,
        "An operator whose result's size depends on the data (masked_select, nonzero, index with a "
        "boolean mask) writes into an out planned for fewer elements than its inputs' sizes let it "
        "produce: its kernel resizes the out to the count it finds, and the run fails "
        "(InvalidArgument) when the count exceeds the planned capacity.",
        "For masked_select with a mask that broadcasts the input to more elements: broadcast both "
        "first (x, mask = torch.broadcast_tensors(x, mask)), since torch.export bounds the result by "
        "the input's elements alone. Otherwise re-export, without a torch._check that bounds the "
        "result's size below what the data can make.",
        "pte",
    ),
    Rule(
        "EG530",
        "weight-repacked-same-source",
        Severity.ERROR,
        "Between the shipped program and the new build, a weight's XNNPACK cache key changed while "
        "its source did not (the same delegate value, shape and datatype, with the same bytes under "
        "another key, or the same float weight quantized to other integers): every device re-packs "
        "it after the update, and a cache that keeps old entries grows by it, for nothing.",
        "Make the export deterministic for unchanged weights: the same quantizer settings and "
        "observers as the shipped build, weights quantized once and reused (not re-calibrated per "
        "build), folds on fixed inputs; then export-guards diff again. check --reproducible finds "
        "what differs between two exports of one model.",
        "update",
    ),
    Rule(
        "EG531",
        "weight-cache-stale",
        Severity.ERROR,
        "A weight keeps its XNNPACK cache key (its filter's and bias's named-data keys) across the "
        "update while what it packs changed (its scales, or bytes under a key that is not their "
        "hash): a cache keyed by name serves the old packing, and the new build computes with the "
        "old weight.",
        "Give changed data a new key (XNNPACK's own keys are the SHA-256 of the bytes: write the "
        "program with ExecuTorch's serializer, do not edit its named data), or clear the device's "
        "weights cache when the update installs.",
        "update",
    ),
    Rule(
        "EG532",
        "weight-repacked",
        Severity.INFO,
        "A weight of the new build has a cache key the shipped program lacks, because its source "
        "changed (new values, shape or datatype, or a weight it is packed with changed) or is new: "
        "the first launch after the update packs it. The finding gives its bytes.",
        "Nothing to fix when the weights were meant to change. To keep an update's re-packing "
        "small, change only the layers that need it.",
        "update",
    ),
    Rule(
        "EG533",
        "weight-orphaned",
        Severity.INFO,
        "A cache key of the shipped program that no weight of the new build uses: a cache that "
        "keeps old entries holds its bytes for nothing. The finding gives its bytes.",
        "Nothing to fix in the program; a cache that is not pruned after an update keeps these "
        "bytes (delete the weights cache file when the update installs).",
        "update",
    ),
    Rule(
        "EG534",
        "weight-reused",
        Severity.INFO,
        "A weight of the new build whose cache key the shipped program has too: a cache keyed by "
        "name reuses its packing.",
        "Nothing to fix.",
        "update",
    ),
    Rule(
        "EG535",
        "weight-cache-account",
        Severity.INFO,
        "What the update does to XNNPACK's packed-weight cache, in total: the cache entries "
        "reused, re-packed and orphaned with their bytes, and what a cache that keeps its old "
        "entries grows by.",
        "Nothing to fix; EG530 and EG531 say what should not be there.",
        "update",
    ),
)

CATALOG: Mapping[str, Rule] = MappingProxyType({r.code: r for r in _RULES})
"""Every code export-guards can report, by code, in code order (no checks bound)."""

RETIRED: Mapping[str, str] = MappingProxyType(
    {
        "EG306": "retired in 0.2: its claim was false, since ExecuTorch stores identical constant data once "
        "(a copy of a 256x256 Linear gives the same .pte size as a tied one)",
    }
)
"""Codes that export-guards no longer reports, and why: naming one is an error that says so."""

DEFAULT_OFF: frozenset[str] = frozenset({"EG003"})
"""Codes reported only when a select names them by their full code (``--extend-select EG003``):
the default ``select = ["EG"]``, or any prefix, leaves them out."""


def rule(code: str) -> Callable[[Check], Rule]:
    """Bind the decorated function as the check of ``code``'s entry; returns that rule.

    Raises:
        KeyError: ``code`` has no entry in the catalog (add one first).
    """
    if code not in CATALOG:
        raise KeyError(f"{code} is not in export_guards/ruleset/catalog.py: add its entry there first")

    def bind(check: Check) -> Rule:
        return CATALOG[code].checked_by(check)

    return bind
