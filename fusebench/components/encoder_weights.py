"""Pretrained encoders as named rows of a board (components layer; issue #32).

``fusebench run B --encoder-weights mine=enc.pt`` (spec field ``encoder_weights: {mine: enc.pt}``, Python
``fusebench.run(B, encoder_weights={"mine": "enc.pt"})``) evaluates weights trained elsewhere under the
board's downstream protocol as the row ``mine``: the spec's encoder is built as for every other row, the
file's weights are loaded into it (strictly), nothing is pretrained, and the downstream protocol scores it.

* :func:`add_rows` / :func:`resolve` turn each entry (a path, or ``{path, sha256}``) into
  ``{"path": absolute path, "sha256": hex}`` when the spec is loaded: a row name that is not an id, or that is
  an objective or a reference row id, a file that is not there, a ``sha256`` that does not match, a pipeline
  that builds no encoder -- one :class:`ConfigError` naming the key, before any data is read;
* :func:`read_state` reads the file safely: safetensors (``.safetensors``), else ``torch.load(...,
  weights_only=True)`` (no pickled code runs); a ``best.pt`` / ``last.pt`` of a run (``{"model": state}``), a
  plain ``state_dict`` of the encoder, or of a :class:`~fusebench.components.model.TaskModel` (``backbone.*``
  keys; the head's ``head.*`` keys are left out);
* :func:`mismatch` is the strict ``load_state_dict`` as a dry run: the parameter names missing from the
  file, those the encoder does not have, and those of another shape (None: it fits);
* :func:`load_into` checks the file is the one the sweep hashed and loads it into the backbone.

The runner checks every row's file against the built encoder once, before the first cell
(:func:`fusebench.cells.standard.check_weights_fit`). The row's record carries ``encoder_weights`` (name,
path, sha256, the encoder id and its resolved config); its cells' config hash covers the file's sha256 (not its
path: ``fusebench.components.identity.cell_identity``).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any, Mapping

from fusebench.io import sha256_file
from fusebench.registry import ID_RULE, valid_id
from fusebench.typed import ConfigError

#: the key of a run's checkpoint (best.pt, last.pt of the downstream phase) holding the model's state
CHECKPOINT_KEYS = ("model", "state_dict", "encoder")


def _taken(spec: Any) -> dict[str, str]:
    """Ids a row name must not take: every registered objective and every reference row (of any protocol)."""
    from fusebench import objectives
    from fusebench.components.protocols import PROTOCOLS
    from fusebench.components.rows import references

    taken = {o: "an objective id" for o in objectives.available()}
    for p in PROTOCOLS.available():
        taken.update({r: "a reference row id" for r in PROTOCOLS.get(p).reference_rows})
    taken.update({r: "a reference row id" for r in references()})
    return taken


def resolve(name: Any, given: Any, spec: Any, key: str) -> dict[str, str]:
    """One entry resolved to ``{"path", "sha256"}``; a :class:`ConfigError` naming ``key`` when it cannot be."""
    if not valid_id(name):
        hint = f" (did you mean {name.lower()!r}?)" if isinstance(name, str) and valid_id(name.lower()) else ""
        raise ConfigError(f"{key}: row name {name!r} is not an id ({ID_RULE}){hint}: it becomes the row's folder "
                          f"and its name on the board")
    taken = _taken(spec)
    if name in taken:
        raise ConfigError(f"{key}: row name {name!r} is {taken[name]}: the weights' row would be confused with "
                          f"it on the board; choose another name (e.g. {name + '_weights'!r})")
    from fusebench.pipelines import PIPELINES

    if spec.pipeline in PIPELINES:
        pipeline = PIPELINES.build(spec.pipeline)
        if not (pipeline.builds_encoder and pipeline.downstream):
            raise ConfigError(f"{key}: the {spec.pipeline} pipeline builds no encoder scored by a downstream "
                              f"protocol: there is nothing to load the weights into")
    expected = None
    if isinstance(given, Mapping):
        unknown = sorted(set(map(str, given)) - {"path", "sha256"})
        if unknown or "path" not in given:
            raise ConfigError(f"{key}: expected a path or a mapping {{path, sha256 (optional)}}, got keys "
                              f"{sorted(map(str, given))}")
        expected, given = given.get("sha256"), given["path"]
        if expected is not None and not (isinstance(expected, str) and re.fullmatch(r"[0-9a-f]{64}", expected)):
            raise ConfigError(f"{key}.sha256: expected the file's SHA-256 as 64 lowercase hex digits (a quoted "
                              f"string: `sha256sum FILE`), got {expected!r}")
    if not isinstance(given, (str, Path)) or not str(given):
        raise ConfigError(f"{key}: expected the path of a weights file (.pt / .pth / .safetensors), got {given!r}")
    path = Path(given).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"{key}: {given} is not a file (resolved to {path}); name a weights file")
    digest = sha256_file(path)
    if expected is not None and expected != digest:
        raise ConfigError(f"{key}: {path} has sha256 {digest}, not the {expected!r} the spec expects")
    return {"path": str(path), "sha256": digest}


def add_rows(spec: Any, given: Mapping[str, Any] | None, source: str) -> None:
    """Resolve the spec's own ``encoder_weights`` entries and add ``given`` (``--encoder-weights``, the Python
    API's ``encoder_weights``) to them, in place; a name given twice is an error."""
    current = getattr(spec, "encoder_weights", None) or {}
    if not isinstance(current, Mapping):
        raise ConfigError(f"{source}: encoder_weights: expected a mapping of row names to weights files, got "
                          f"{current!r}")
    out = {name: resolve(name, v, spec, f"{source}: encoder_weights.{name}") for name, v in current.items()}
    for name, v in (given or {}).items():
        if name in out:
            raise ConfigError(f"--encoder-weights {name}=...: the row {name!r} is named twice (the spec has it "
                              f"already, or the option is repeated)")
        out[name] = resolve(name, v, spec, f"--encoder-weights {name}")
    spec.encoder_weights = out


#: torch's words for a pickled global weights_only refuses: "GLOBAL x.y was not an allowed global" (an unknown
#: one), "unsupported GLOBAL x.y whose module x is blocked" (os, posix, sys, subprocess, ...)
_GLOBAL = re.compile(r"GLOBAL (\S+) (?:was not an allowed global|whose module)")
_UNPICKLER = re.compile(r"WeightsUnpickler error:\s*(.*?)\s*(?:Please use|Check the documentation|$)", re.DOTALL)


def load_problem(e: BaseException) -> str:
    """Why ``torch.load(..., weights_only=True)`` refused a file, in one line of our own: for a pickle that needs a
    Python object (the global torch names, kept) that it holds pickled code, never torch's advice to load it with
    ``weights_only=False``; otherwise the exception's type and its text on one line."""
    import pickle

    text = str(e)
    if isinstance(e, pickle.UnpicklingError) and "weights only load failed" in text.lower():
        found = _GLOBAL.search(text)
        if found:
            return (f"it holds a pickled Python object ({found.group(1)}) that loading would have to run; fusebench "
                    "never unpickles code (torch.load weights_only=True): save tensors and plain containers only")
        found = _UNPICKLER.search(text)
        what = " ".join(found.group(1).split()).rstrip(".") if found else ""
        return ("torch.load with weights_only=True refuses it" + (f" ({what[:200]})" if what else "")
                + ": not a file of tensors and plain containers (fusebench never unpickles code)")
    return f"{type(e).__name__}: {' '.join(text.split())[:300]}"


def torch_file_problem(path: Path) -> str | None:
    """Why ``path`` is no file ``torch.save`` wrote (None: it is one, zip or legacy format), said before torch reads
    it: torch's own answer to an empty file, a text file or a plain pickle is ``EOFError``, ``KeyError: 101`` or a
    warning about pickle protocols, none of which says what the file is."""
    import pickle
    import zipfile

    import torch.serialization

    if zipfile.is_zipfile(path):
        return None
    with open(path, "rb") as f:
        zip_head = f.read(4)
    if zip_head == b"PK\x03\x04":  # a zip's first entry, but no end record: cut short or damaged
        return ("a torch.save (zip) file that is truncated or damaged (its zip directory is missing): copy or save it "
                "again")
    # how a file torch.save wrote before its zip format (_use_new_zipfile_serialization=False) begins: torch's
    # legacy magic number, pickled with protocol 2 (written here, never unpickled)
    legacy = pickle.dumps(torch.serialization.MAGIC_NUMBER, protocol=2)
    with open(path, "rb") as f:
        head = f.read(len(legacy))
    if head == legacy:
        return None
    expected = "expected the encoder's state_dict saved by torch.save(state_dict, PATH) or as a .safetensors file"
    if not head:
        return f"the file is empty; {expected}"
    if head[:1] == b"\x80":  # a pickle's PROTO opcode: pickle.dump, not torch.save
        return (f"a plain Python pickle, not a PyTorch checkpoint (torch.save zip format), and fusebench never "
                f"unpickles one; {expected}")
    if head[8:9] == b"{":  # safetensors: an 8-byte header length, then the JSON header
        return ("not a PyTorch checkpoint (torch.save zip format) but, by its first bytes, safetensors: name it "
                ".safetensors")
    return f"not a PyTorch checkpoint (torch.save zip format); {expected}"


def read_state(path: str | Path) -> dict[str, Any]:
    """The encoder's ``state_dict`` in the weights file ``path``, read safely (safetensors, or ``torch.load``
    with ``weights_only=True``): a checkpoint's ``model`` (``state_dict``, ``encoder``) entry when it has one,
    then the ``backbone.*`` keys of a task model (prefix removed), else the file's keys as they are. A file that
    holds no mapping of tensors is a :class:`ConfigError`."""
    import torch

    path = Path(path)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            if torch_file_problem(path) is None:  # a zip or legacy torch.save file under a .safetensors name
                raise ConfigError(f"{path}: not a safetensors file but, by its first bytes, a torch.save file: name "
                                  f"it .pt")

            state: Any = load_file(str(path), device="cpu")
        else:
            problem = torch_file_problem(path)
            if problem:
                raise ConfigError(f"{path}: {problem}")
            with warnings.catch_warnings():  # torch's remarks on a file (pickle protocols) are not the user's
                warnings.simplefilter("ignore")
                state = torch.load(path, map_location="cpu", weights_only=True)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same user error
        raise ConfigError(f"{path}: not a weights file fusebench reads safely (safetensors, or a torch file of "
                          f"tensors loadable with weights_only=True): {load_problem(e)}") from None
    if isinstance(state, Mapping) and state.get("phase") == "pretrain" and isinstance(state.get("pretrainer"), Mapping):
        # a run's last.pt written while it pretrained (fusebench.engine.cell.PHASE_KEYS): the encoder mid-way through
        # pretraining, inside the pretrainer's state; not an encoder of the run to score
        raise ConfigError(f"{path}: a run's checkpoint of its pretraining phase (the last.pt of a run stopped while "
                          f"pretraining, step {state.get('step')!r}): it holds no finished encoder; pass the best.pt of "
                          f"the run once it has finished (rerun its command to finish it), or your encoder's "
                          f"state_dict")
    if isinstance(state, Mapping):
        for k in CHECKPOINT_KEYS:
            if isinstance(state.get(k), Mapping):
                state = state[k]
                break
    if not isinstance(state, Mapping) or not state:
        raise ConfigError(f"{path}: expected a state_dict (a mapping of parameter names to tensors), or a checkpoint "
                          f"with one under {' / '.join(repr(k) for k in CHECKPOINT_KEYS)}")
    if any(isinstance(k, str) and k.startswith("backbone.") for k in state):  # a TaskModel: its encoder part
        other = [k for k in state if not (isinstance(k, str) and k.startswith(("backbone.", "head.")))]
        if other:  # a task model holds its encoder and its head, nothing else: what would be dropped is named
            raise ConfigError(f"{path}: a task model's state_dict (backbone.* keys) with keys that are neither the "
                              f"encoder's (backbone.*) nor its head's (head.*): {other[:5]}; expected the encoder's "
                              f"state_dict, or a task model's")
        state = {k[len("backbone."):]: v for k, v in state.items() if isinstance(k, str) and k.startswith("backbone.")}
    bad = [k for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise ConfigError(f"{path}: entries that are not tensors: {bad[:5]}; expected a state_dict of the encoder")
    keys = [k for k in state if not isinstance(k, str)]
    if keys:
        raise ConfigError(f"{path}: parameter names that are not strings: {keys[:5]}; expected a state_dict of the "
                          f"encoder")
    odd = [f"{k} ({'meta' if v.is_meta else v.layout})" for k, v in state.items()
           if v.is_meta or v.layout != torch.strided]
    if odd:
        raise ConfigError(f"{path}: tensors without dense values (meta or sparse): {odd[:5]}; save the encoder's "
                          f"state_dict itself")
    return dict(state)


def mismatch(backbone: Any, state: Mapping[str, Any]) -> str | None:
    """The strict ``load_state_dict`` of ``state`` into ``backbone`` as a dry run: what does not fit (missing
    names, unexpected names, shape mismatches, each listed), or None."""
    import torch

    own = backbone.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = sorted(f"{k} (file {list(state[k].shape)}, encoder {list(own[k].shape)})" for k in set(own) & set(state)
                    if tuple(state[k].shape) != tuple(own[k].shape))
    # load_state_dict copies with a cast: an integer, boolean or complex tensor would load into a float parameter
    # rounded, as 0 / 1, or without its imaginary part (a warning at most); a float of another width is a value
    dtypes = sorted(f"{k} (file {state[k].dtype}, encoder {own[k].dtype})" for k in set(own) & set(state)
                    if (state[k].is_floating_point(), state[k].is_complex(), state[k].dtype == torch.bool)
                    != (own[k].is_floating_point(), own[k].is_complex(), own[k].dtype == torch.bool))
    nonfinite = sorted(k for k in set(own) & set(state)
                       if state[k].is_floating_point() and not bool(torch.isfinite(state[k]).all()))
    parts = [f"{what}: {', '.join(names)}" for what, names in (("missing from the file", missing),
                                                                  ("unexpected (not in the encoder)", unexpected),
                                                                  ("shape mismatch", shapes),
                                                                  ("dtype mismatch", dtypes),
                                                                  ("NaN or infinite values", nonfinite)) if names]
    return "; ".join(parts) or None


def load_into(backbone: Any, name: str, entry: Mapping[str, str], encoder_id: str,
              config: Mapping[str, Any]) -> None:
    """Load row ``name``'s weights (``entry``: path and sha256) into ``backbone``, strictly; the file must
    still be the one the sweep hashed. A ConfigError naming the row, the file and every mismatching
    parameter otherwise."""
    path = Path(entry["path"])
    if not path.is_file() or sha256_file(path) != entry["sha256"]:
        raise ConfigError(f"encoder_weights.{name}: {path} is gone or changed since the sweep hashed it (sha256 "
                          f"{entry['sha256']}); records name the file they evaluated, so rerun the command")
    state = read_state(path)
    problem = mismatch(backbone, state)
    if problem:
        raise ConfigError(f"encoder_weights.{name}: {path} does not fit encoder {encoder_id!r} with config "
                          f"{dict(config)}: {problem}")
    backbone.load_state_dict(state, strict=True)


def record_field(name: str, entry: Mapping[str, str], encoder_id: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The record's ``encoder_weights`` field: the row, the file (path, sha256), the encoder it was loaded into."""
    return {"name": name, "path": entry["path"], "sha256": entry["sha256"],
            "encoder": {"id": encoder_id, "config": dict(config)}}


__all__ = ["CHECKPOINT_KEYS", "add_rows", "load_into", "load_problem", "mismatch", "read_state", "record_field",
           "resolve"]
