"""The one settings object: which codes are reported and how much each matters, and how a
model is exported (backend, placement policy, fold). ``[tool.export-guards]``, the command line
and the pytest marker and options all make one. Imports neither torch nor ExecuTorch."""

from __future__ import annotations

import difflib
import json
import tomllib
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, final, get_args

from export_guards.backends import BACKEND_TABLE
from export_guards.report import Severity
from export_guards.ruleset.catalog import CATALOG, DEFAULT_OFF, RETIRED
from export_guards.ruleset.registry import known_rules, project_prefixes

__all__ = [
    "BACKENDS",
    "DEFAULT_MAX_GROWTH",
    "DEVICE_MEMORY_BACKENDS",
    "EXTENDING",
    "PLACEMENT_POLICIES",
    "RECIPES",
    "Backend",
    "PlacementPolicy",
    "Settings",
    "did_you_mean",
    "find_config",
    "with_keywords",
]

Backend = Literal["xnnpack", "portable", "cuda"]
"""``"xnnpack"`` lowers with ``XnnpackPartitioner``; ``"portable"`` delegates nothing;
``"cuda"`` lowers with ExecuTorch's ``CudaPartitioner`` (AOTInductor; needs a CUDA machine),
which holds device constants on purpose."""
BACKENDS: tuple[str, ...] = tuple(info.name for info in BACKEND_TABLE if info.name)
"""The backends a setting may name, from the one table (``backends.BACKEND_TABLE``)."""
DEVICE_MEMORY_BACKENDS: tuple[str, ...] = tuple(
    info.name for info in BACKEND_TABLE if info.name and info.holds_device_memory
)
"""The backends whose partitioner reads device constants from the device itself."""

PlacementPolicy = Literal["error", "copy"]
"""``"error"`` raises on a misplaced constant; ``"copy"`` copies constants to the host."""
PLACEMENT_POLICIES: tuple[str, ...] = get_args(PlacementPolicy)

DEFAULT_MAX_GROWTH = 1.25
"""The fold's default budget: the folds that give a delegate a static weight may grow the
program's constants by a quarter, all together."""

RECIPES: tuple[str, ...] = (
    "arm_ethos_u55_int8", "arm_ethos_u65_int8", "arm_ethos_u85_int8", "arm_tosa_a16w8", "arm_tosa_fp", "arm_tosa_int8",
    "arm_vgf_fp", "arm_vgf_int8",
    "coreml_codebook_weight_only", "coreml_fp16", "coreml_fp32", "coreml_pt2e_int8_static", "coreml_pt2e_int8_weight_only",
    "coreml_torchao_int4_weight_only_per_channel", "coreml_torchao_int4_weight_only_per_group",
    "coreml_torchao_int8_weight_only_per_channel", "coreml_torchao_int8_weight_only_per_group",
    "qnn_fp16",
    "xnnpack_fp32", "xnnpack_pt2e_int8_dynamic_per_channel", "xnnpack_pt2e_int8_static_per_channel",
    "xnnpack_pt2e_int8_static_per_tensor", "xnnpack_torchao_int8da_int4w_per_channel", "xnnpack_torchao_int8da_int4w_per_tensor",
)  # fmt: skip
"""Every recipe name ExecuTorch 1.5 defines for the backends whose recipes the guards offer
(XNNPACK, Core ML, Qualcomm, Arm), known without importing ExecuTorch so that a misspelt name is
an error before any work. Whether one can be made here still depends on its backend's SDK
(``export_guards.recipes.recipe_names()`` lists those); a test keeps this table equal to
ExecuTorch's recipe types."""


@final
@dataclass(frozen=True)
class Settings:
    """Everything a user can set, as in ``[tool.export-guards]`` of ``pyproject.toml``.

    Attributes:
        select: codes or code prefixes to report (``"EG"``: all of export-guards' own;
            ``"EG2"``: the weight rules). The default is ``"EG"`` and the prefix of every
            project's rules installed (``export_guards.ruleset.registry``). A code off by
            default (``ruleset.catalog.DEFAULT_OFF``: EG003) needs its full code here.
        ignore: codes or prefixes not to report; an ignore wins over a select of the same
            length or shorter (``select=["EG301"], ignore=["EG3"]`` still reports EG301).
        severity: per-code severity overrides.
        fail_level: findings at or above it fail (exit 1, a failing test, the lint pass raises).
        backend: the partitioner a guarded export lowers with (``BACKENDS``).
        placement: what a guarded export does with device constants (``PLACEMENT_POLICIES``).
        fold: whether a guarded export folds constant-only computations.
        fold_max_growth: the fold's budget: the folds that give a delegate a static weight may
            grow the program's constants, all together, to at most this many times their
            bytes (``fold-max-growth``; at least 1). Folds that shrink the program need none.
        recipe: an ExecuTorch recipe (``executorch.export``) to export with instead of
            ``backend``, by name (``"xnnpack_fp32"``; one of ``RECIPES``, of which
            ``export_guards.recipes.recipe_names()`` lists those this machine can make).
        show_info: list info findings in the text report (``--show-info``); by default they are
            only counted on its summary line. JSON and SARIF hold them always.
    """

    select: tuple[str, ...] = field(default_factory=lambda: ("EG", *project_prefixes()))
    ignore: tuple[str, ...] = ()
    severity: Mapping[str, Severity] = field(default_factory=dict)
    fail_level: Severity = Severity.ERROR
    backend: Backend = "xnnpack"
    placement: PlacementPolicy = "error"
    fold: bool = True
    fold_max_growth: float = DEFAULT_MAX_GROWTH
    recipe: str | None = None
    show_info: bool = False

    def enabled(self, code: str) -> bool:
        """Whether findings of ``code`` are reported: the longest matching prefix decides. A
        code that is off by default (``DEFAULT_OFF``) is selected only by its full code."""
        off = code in DEFAULT_OFF
        selected = max((len(p) for p in self.select if code.startswith(p) and not (off and p != code)), default=-1)
        return selected > self._ignored(code)

    def ignores(self, code: str) -> bool:
        """Whether an ignore names ``code`` (or a prefix of it), whatever is selected."""
        return self._ignored(code) >= 0

    def _ignored(self, code: str) -> int:
        return max((len(p) for p in self.ignore if code.startswith(p)), default=-1)

    def severity_of(self, code: str, default: Severity) -> Severity:
        """The severity findings of ``code`` get: the user's override, else ``default``."""
        return self.severity.get(code, default)

    def __post_init__(self) -> None:
        # Every way of making settings is checked here, and normalised: codes upper-case,
        # severities and fail levels as ``Severity``.
        normalised = {
            "select": _codes(self.select, "select"),
            "ignore": _codes(self.ignore, "ignore"),
            "severity": _severities(self.severity),
            "fail_level": _severity(self.fail_level, "fail-level"),
            "backend": _choice(self.backend, "backend", BACKENDS),
            "placement": _choice(self.placement, "placement", PLACEMENT_POLICIES),
        }
        if (
            isinstance(self.fold_max_growth, bool)
            or not isinstance(self.fold_max_growth, (int, float))
            or not self.fold_max_growth >= 1
        ):
            raise ValueError(
                f"fold-max-growth must be a number of times the program's size, at least 1, not {self.fold_max_growth!r}"
            )
        for switch in ("fold", "show_info"):
            if not isinstance(getattr(self, switch), bool):
                raise ValueError(f"{switch.replace('_', '-')} must be true or false, not {getattr(self, switch)!r}")
        if self.recipe is not None and self.recipe not in RECIPES:
            close = difflib.get_close_matches(str(self.recipe), RECIPES, n=3)
            hint = f"; did you mean {' or '.join(close)}?" if close else f"; recipes: {', '.join(RECIPES)}"
            raise ValueError(f"recipe {self.recipe!r} is not one of ExecuTorch's recipe names{hint}")
        for name, value in normalised.items():
            object.__setattr__(self, name, value)
        if not any(self.enabled(code) for code in CATALOG) and not any(map(self.enabled, known_rules())):
            raise ValueError(
                f"select {list(self.select)} with ignore {list(self.ignore)} reports no code at all: "
                "a check that selects nothing would always pass"
            )

    def updated(
        self, options: Mapping[str, Any], where: str = "[tool.export-guards]", *, keywords: Iterable[str] | None = None
    ) -> Settings:
        """These settings with ``options`` applied (keys as in ``pyproject.toml``; ``fail-level``
        and ``fail_level`` alike), each value checked. ``extend-select`` / ``extend-ignore`` add
        to the select / ignore that applies (this one's, or one ``options`` gives). A ``backend``
        in ``options`` (without a ``recipe``) drops the recipe these settings had: the later
        choice wins. With ``keywords`` the options are a Python call's keyword arguments (a
        pytest fixture's, the marker's): an unknown one is answered with Python names
        (``fail_level``), the call's own ``keywords`` among them.

        Raises:
            ValueError: an unknown key (with the closest known one) or a bad value, naming the
                key, what is accepted, and ``where`` the options came from.
        """
        known = {f.name for f in fields(self)} | set(EXTENDING)
        unknown = sorted(k for k in options if str(k).replace("-", "_") not in known)
        if unknown:
            accepted = sorted(k.replace("_", "-") for k in known) if keywords is None else sorted(known | set(keywords))
            close = [
                f"{key} (did you mean {match[0]}?)"
                if (match := difflib.get_close_matches(str(key), accepted, n=1))
                else key
                for key in unknown
            ]
            raise ValueError(f"unknown setting(s) {', '.join(close)} in {where}; accepted: {', '.join(accepted)}")
        changes = {key.replace("-", "_"): value for key, value in options.items()}
        for extending, extended in EXTENDING.items():
            if extending in changes:
                changes[extended] = (
                    *_codes(changes.get(extended, getattr(self, extended)), extended),
                    *_codes(changes.pop(extending), extending.replace("_", "-")),
                )
        if "backend" in changes and "recipe" not in changes:  # a backend given here wins over an inherited recipe
            changes["recipe"] = None
        try:
            return replace(self, **changes)
        except ValueError as error:
            raise ValueError(f"{error} (in {where})") from None

    def to_json(self) -> str:
        """Every field, whole, as JSON: what a child process is handed
        (:meth:`from_json` makes the equal settings again). Severities are their names."""
        return json.dumps({f.name: _plain(getattr(self, f.name)) for f in fields(self)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Settings:
        """The settings :meth:`to_json` wrote, equal to those it was given.

        Raises:
            ValueError: ``text`` is not such settings (not JSON, a field missing or unknown, or
                a bad value), saying which.
        """
        values = json.loads(text)
        names = {f.name for f in fields(cls)}
        if not isinstance(values, dict) or set(values) != names:
            got = sorted(values) if isinstance(values, dict) else type(values).__name__
            raise ValueError(f"serialised settings hold exactly the fields {sorted(names)}; not {got}")
        return cls(**values)

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any]) -> Settings:
        """Settings from a ``[tool.export-guards]`` table (see :meth:`updated`)."""
        return cls().updated(table)

    @classmethod
    def from_pyproject(cls, path: str | Path) -> Settings:
        """The ``[tool.export-guards]`` table of ``path`` (defaults when there is none).

        Raises:
            ValueError: the file is not valid TOML, or the table has a bad key or value.
            OSError: the file cannot be read.
        """
        return cls().updated(_table(Path(path)) or {}, f"[tool.export-guards] of {path}")

    @classmethod
    def discover(cls, start: str | Path) -> tuple[Settings, Path | None]:
        """The settings of the nearest ``pyproject.toml`` with a ``[tool.export-guards]``
        table in ``start`` or a folder above it (as ruff finds its configuration), and that
        file; defaults and ``None`` when there is none up to the filesystem's root.

        Raises:
            ValueError: a ``pyproject.toml`` on the way is not valid TOML, or the table has a
                bad key or value.
        """
        found = find_config(start)
        return (cls.from_pyproject(found), found) if found is not None else (cls(), None)


EXTENDING = {"extend_select": "select", "extend_ignore": "ignore"}
"""Keys that add to another key's codes instead of replacing them."""


def with_keywords(config: Settings | None, caller: str, **given: object) -> Settings:
    """``config`` (by default ``Settings()``) with the keyword arguments a Python call gave it
    (those not ``None``; ``fold_max_growth``, ``placement``, ...) applied and checked: the one
    place where a function's keywords and its settings merge, so that every guarded way takes the
    options as one value. The keywords are deprecated (``config=Settings(...)`` is the one way):
    each call that gives one warns, naming the ``Settings`` that says the same.

    Raises:
        ValueError: a bad value, naming the keyword and ``caller``.
    """
    given = {k: v for k, v in given.items() if v is not None}
    if given:
        spelled = (
            f"Settings({', '.join(f'{k}={v!r}' for k, v in given.items())})"
            if config is None
            else f"config.updated({given!r})"
        )
        warnings.warn(
            f"export_guards: {caller}({', '.join(f'{k}=' for k in given)}) is deprecated: pass config={spelled}",
            DeprecationWarning,
            stacklevel=3,
        )
    return (Settings() if config is None else config).updated(given, caller)


def find_config(start: str | Path) -> Path | None:
    """The nearest ``pyproject.toml`` with a ``[tool.export-guards]`` table, in ``start`` (a
    folder, or a file's folder) or a folder above it; ``None`` when none has one.

    Raises:
        ValueError: a ``pyproject.toml`` on the way is not valid TOML.
    """
    folder = Path(start).resolve()
    if not folder.is_dir():
        folder = folder.parent
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        if path.is_file() and _table(path) is not None:
            return path
    return None


def _table(path: Path) -> Mapping[str, Any] | None:
    """``path``'s ``[tool.export-guards]`` table, or ``None`` when it has none."""
    with open(path, "rb") as file:
        try:
            data = tomllib.load(file)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"{path} is not valid TOML: {error}") from None
    table = data.get("tool", {}).get("export-guards")
    if table is not None and not isinstance(table, Mapping):
        raise ValueError(f"[tool.export-guards] of {path} must be a table of settings, not {table!r}")
    return table


def _plain(value: object) -> object:
    """A field's value as JSON holds it: a tuple as a list, a severity as its name."""
    if isinstance(value, Severity):
        return value.value
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return value


def _codes(value: object, key: str) -> tuple[str, ...]:
    if isinstance(value, str):  # one code, as a marker or a TOML string may give it
        value = [value]
    if not isinstance(value, Iterable) or not all(isinstance(v, str) for v in value):
        raise ValueError(f'{key} must be a list of rule codes or prefixes such as "EG2", not {value!r}')
    codes = tuple(v.strip().upper() for v in value)
    for code in codes:  # a typo must not turn a rule off, nor select nothing
        if code in RETIRED:
            raise ValueError(f"{key} names {code}, which was {RETIRED[code]}: remove it")
        if not code or not _names_a_code(code):
            raise ValueError(f"{key} names {code!r}, which is no code nor prefix of one{did_you_mean(code)}")
    return codes


def _names_a_code(prefix: str) -> bool:
    """Whether ``prefix`` is a known code or the start of one (project rules load only for a
    prefix that is not export-guards' own)."""
    return any(known.startswith(prefix) for known in CATALOG) or any(
        known.startswith(prefix) for known in known_rules()
    )


def did_you_mean(code: str) -> str:
    """``; did you mean EG501?`` (a known code, or a prefix as long as ``code``), or how to list
    the codes when nothing is close."""
    known = sorted({k[: len(code)] for k in known_rules() if len(k) >= len(code)})
    confused = code.translate(str.maketrans("OIL", "011"))  # letters typed for digits
    match = confused if confused in known else next(iter(difflib.get_close_matches(code, known, n=1)), None)
    hint = f"; did you mean {match}?" if match else ""
    return f"{hint} (`export-guards rules` lists every code)"


def _severities(value: object) -> dict[str, Severity]:
    if not isinstance(value, Mapping):
        raise ValueError(
            "severity must be a table of rule code to severity, such as "
            f'[tool.export-guards.severity] EG304 = "error"; not {value!r}'
        )
    severities = {}
    for code, level in value.items():
        normalized = str(code).strip().upper()
        if normalized in RETIRED:
            raise ValueError(f"severity names {normalized}, which was {RETIRED[normalized]}: remove it")
        if normalized not in CATALOG and normalized not in known_rules():
            raise ValueError(f"severity keys are rule codes such as EG304, not {code!r}{did_you_mean(normalized)}")
        severities[normalized] = _severity(level, f"severity.{code}")
    return severities


def _severity(value: object, key: str) -> Severity:
    if isinstance(value, Severity):
        return value
    try:
        return Severity(str(value).lower())
    except ValueError:
        raise ValueError(f"{key} must be one of error, warning, info; not {value!r}") from None


def _choice(value: object, key: str, accepted: tuple[str, ...]) -> Any:
    if value not in accepted:
        raise ValueError(f"{key} must be one of {', '.join(accepted)}; not {value!r}")
    return value
