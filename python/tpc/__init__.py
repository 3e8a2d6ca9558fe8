"""tpc from Python: import a HuggingFace model, compile it into a tensor-parallel
plan in-process, and train, evaluate or generate with it on this process's rank.

    import tpc
    module = tpc.import_hf("gpt2-small/", batch=8, seq=256)
    plan = tpc.compile(module, mode="1d", grid=[2])
    session = tpc.Session(plan, device="cpu")
    session.configure_training(steps=100, lr=3e-4)
    for tokens, targets in batches:            # NumPy arrays or DLPack tensors
        loss = session.train_step(tokens, targets)

Under ``mpirun -np N python3 train.py`` each rank is one process running the
same script on a plan whose grid has N ranks; every rank must make the same
calls with the same values (they are checked, and a rank that differs raises
on all of them). Errors raise ValueError (bad arguments or inputs) or
RuntimeError (files, plans, the machine) with the one-line messages the
command-line tools print.
"""

import os as _os
import tempfile as _tempfile

import numpy as _np

# OpenMPI loads its transport plugins with dlopen; they need libmpi's symbols
# global, which a Python extension's libraries are not (mpi4py does the same).
# Only libmpi: the module's own symbols stay local, beside PyTorch's.
try:
    import ctypes as _ctypes
    import ctypes.util as _ctypes_util
    _libmpi = _ctypes_util.find_library("mpi")
    if _libmpi:
        _ctypes.CDLL(_libmpi, mode=_os.RTLD_GLOBAL | _os.RTLD_NOW)
except OSError:
    pass  # without MPI's library the import below says what is missing
from . import _tpc

__all__ = ["Module", "Plan", "Session", "import_config", "import_hf", "compile",
           "read_tokens", "rank", "world_size"]


def read_tokens(path):
    """A token file (tpc-tokenize's, what tp-run --data reads) as int32 ids."""
    return _tpc.read_token_file(_os.fspath(path))


def rank():
    """This process's rank in the mpirun job (0 without mpirun)."""
    return _tpc.world_rank()


def world_size():
    """The number of ranks in the mpirun job (1 without mpirun)."""
    return _tpc.world_size()


class Module:
    """A model in the tp dialect, as tpc-import writes it (global view, one
    program per function: @forward, @loss, and with a KV cache @prefill and
    @decode)."""

    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text

    def save(self, path):
        """Writes the module as .mlir text (atomically)."""
        _write_atomically(path, self.text.encode())


def import_config(config_path, batch, seq=None, kv_cache=0):
    """The model a config.json describes: a HuggingFace GPT-2 or LLaMA (and
    the generation_config.json beside it), for steps of `batch` sequences of
    `seq` tokens, with `kv_cache` > 0 also the generation programs over KV
    caches of that many positions (tpc-import --kv-cache); or a DLRM
    (model_type "dlrm", docs/dlrm.md), for steps of `batch` samples and no
    `seq`."""
    _check_int("batch", batch, 1)
    if seq is not None:
        _check_int("seq", seq, 1)
    _check_int("kv_cache", kv_cache, 0)
    return Module(_tpc.import_model(_os.fspath(config_path), batch, seq,
                                    kv_cache))


def import_hf(directory, batch, seq, kv_cache=0):
    """import_config on a HuggingFace model directory's config.json."""
    directory = _os.fspath(directory)
    if not _os.path.isdir(directory):
        raise ValueError(f"{directory}: not a directory (a HuggingFace model "
                         "directory holds config.json)")
    return import_config(_os.path.join(directory, "config.json"), batch, seq,
                         kv_cache)


class Plan:
    """A compiled plan: what tp-run runs (``save`` writes the .tpplan file)."""

    def __init__(self, data, report=()):
        self.data = bytes(data)
        # What the compile reported: the communication per rank of each
        # program, mode=auto's choice.
        self.report = list(report)
        self._json = None

    @classmethod
    def load(cls, path):
        with open(path, "rb") as f:
            return cls(f.read())

    def save(self, path):
        """Writes the plan file (atomically)."""
        _write_atomically(path, self.data)

    def json(self):
        """The plan as tp-run inspect prints it (a dict)."""
        if self._json is None:
            import json
            self._json = json.loads(_tpc.plan_json(self.data))
        return self._json

    @property
    def grid(self):
        return self.json()["grid"]

    @property
    def programs(self):
        return [p["name"] for p in self.json()["programs"]]

    @property
    def memory(self):
        """Bytes per rank: each program's arena, and the parameters."""
        plan = self.json()
        memory = {p["name"]: p["arena_bytes"] for p in plan["programs"]}
        return memory


def _option_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "x".join(str(int(v)) for v in value)
    return str(value)


def compile(module, mode="none", grid=None, dp=1, precision="f32",
            rebalance=False, **options):
    """Compiles `module` with tp-pipeline in this process and returns the Plan.

    mode: none, 1d, 2d, 2.5d, 3d or auto; grid: the scheme's grid (e.g. [2] or
    [2, 2]; for mode=auto the rank count); dp: data-parallel replicas;
    precision: f32, bf16 or tf32; rebalance: plan for run-time rebalancing.
    Any other tp-pipeline option by name, dashes as underscores
    (seq_parallel=True, weight_decay=0.1, remat="full", cluster="c.json").
    """
    if not isinstance(module, Module):
        raise TypeError("compile takes a tpc.Module (tpc.import_hf or "
                        f"tpc.import_config), not {type(module).__name__}")
    given = {"mode": mode, "dp": dp, "precision": precision,
             "rebalance": rebalance}
    if grid is not None:
        given["grid"] = [grid] if isinstance(grid, int) else grid
    given.update(options)
    text = " ".join(f"{name.replace('_', '-')}={_option_text(value)}"
                    for name, value in given.items())
    data, remarks = _tpc.compile(module.text, text)
    return Plan(data, remarks)


def _as_token_array(value, what):
    """int32, C-contiguous, without a copy where the memory allows: NumPy
    arrays as they are, DLPack tensors (PyTorch's) through numpy.from_dlpack."""
    if not isinstance(value, _np.ndarray):
        if hasattr(value, "__dlpack__"):
            value = _np.from_dlpack(value)
        else:
            value = _np.asarray(value)
    if value.dtype.kind not in "iu":
        raise ValueError(f"{what} must hold integer token ids, not {value.dtype}")
    return _np.ascontiguousarray(value, dtype=_np.int32)


def _as_feature_array(value, what):
    """float32, C-contiguous, as _as_token_array."""
    if not isinstance(value, _np.ndarray):
        if hasattr(value, "__dlpack__"):
            value = _np.from_dlpack(value)
        else:
            value = _np.asarray(value)
    if value.dtype.kind != "f":
        raise ValueError(f"{what} must hold floats, not {value.dtype}")
    return _np.ascontiguousarray(value, dtype=_np.float32)


class Session:
    """A plan opened on this rank: the grid, the device and the parameters.

    plan: a Plan or a .tpplan path; device: cpu, cuda or staged-cpu (default:
    cuda when a GPU is visible, else cpu); weights: a safetensors file of
    parameters by HF name (default: the deterministic initialisation every
    plan of the model shares, as tp-run's)."""

    def __init__(self, plan, device="", weights=None):
        if isinstance(plan, Plan):
            self._native = _tpc.Session(plan.data, "", device, weights or "")
        else:
            self._native = _tpc.Session(None, _os.fspath(plan), device,
                                        _os.fspath(weights) if weights else "")

    @property
    def tokens_shape(self):
        """[batch, seq] of train_step's tokens."""
        return self._native.tokens_shape("train_step")

    def configure_training(self, steps, lr=3e-4, min_lr=None, warmup=None,
                           decay_steps=None, clip=1.0, rebalance="off",
                           slow=(), rank_speeds=(), rebalance_window=3,
                           rebalance_patience=2, rebalance_threshold=0.2,
                           rebalance_min_gain=0.1):
        """The run tp-run train would make: AdamW with linear warmup (default
        min(100, steps/10)) and cosine decay from lr to min_lr (default lr/10)
        over decay_steps (default steps), global-norm clipping; rebalancing
        when a rank straggles (off, resize, migrate, auto), emulated
        stragglers ("RANK:FACTOR[:FROM[:TO]]") and known rank speeds."""
        _check_int("steps", steps, 1)
        self._native.configure_training(
            steps, float(lr), min_lr, warmup, decay_steps, float(clip),
            rebalance, list(slow), [float(s) for s in rank_speeds],
            rebalance_window, rebalance_patience, float(rebalance_threshold),
            float(rebalance_min_gain))

    def train_step(self, tokens, targets, dense=None, next_tokens=None):
        """One AdamW step on [batch, seq] tokens and their targets (a DLRM:
        [batch, ids per sample] ids, [batch, 1] 0/1 labels and dense, the
        [batch, 1, features] float32 dense features); returns the loss (the
        mean cross-entropy before the update). next_tokens, the next step's
        tokens when known, let cached embedding tables gather that step's
        rows while this one runs (the lookahead)."""
        return self._native.train_step(
            _as_token_array(tokens, "tokens"),
            _as_token_array(targets, "targets"),
            None if dense is None else _as_feature_array(dense, "dense"),
            None if next_tokens is None else _as_token_array(next_tokens, "next_tokens"))

    @property
    def targets_shape(self):
        """train_step's targets: [batch, seq], a DLRM's [batch, 1]."""
        return self._native.targets_shape

    @property
    def dense_shape(self):
        """train_step's dense features, [batch, 1, features] (a DLRM's); []
        when it takes none."""
        return self._native.dense_shape

    @property
    def embedding_caches(self):
        """This rank's cached embedding tables and what their caches did so
        far (tp-run --metrics' embedding_caches): slots, block_rows, lookups,
        misses, hit_rate, rows and bytes fetched and written back, seconds,
        rows_prefetched, lookahead_seconds, lookaheads_skipped."""
        import json
        return json.loads(self._native.embedding_caches)

    def rank_cached_rows(self, ids):
        """Before the first step of a plan with cached embedding tables
        (tp-pipeline embedding-cache=RATIO): ranks each table's rows by how
        often `ids`, the training ids in step order, use them, so the cache
        keeps the most frequent (tp-run train does this with its token
        file); without it rows rank by id. After resume the checkpoint's
        ranking stands and `ids` only size the caches' batches."""
        self._native.rank_cached_rows(
            _as_token_array(ids, "ids").reshape(-1))

    @property
    def step(self):
        """Steps completed (after a resume: counted from the checkpoint's)."""
        return self._native.step

    @property
    def learning_rate(self):
        """The last step's learning rate."""
        return self._native.learning_rate

    def resume(self, path):
        """Continues from a checkpoint directory (or one with `latest`):
        parameters, AdamW's moments and the step. Returns the step."""
        return self._native.resume(_os.fspath(path))

    def evaluate(self, tokens, targets=None, program="loss"):
        """@loss's mean loss on one batch, or @forward's logits (program=
        "forward"), on the parameters as they are."""
        return self._native.evaluate(
            _as_token_array(tokens, "tokens"),
            None if targets is None else _as_token_array(targets, "targets"),
            program)

    def generate(self, prompts, max_new_tokens, temperature=0.0, top_k=0,
                 top_p=1.0, seed=0, ignore_eos=False, kv_cache=True):
        """Continues each prompt (a list of token ids; at most the plan's
        batch of them) by up to max_new_tokens tokens, as tp-run generate:
        greedy at temperature 0, else sampled (sample i from seed + i),
        stopping at the model's end token unless ignore_eos. Returns the new
        tokens of each prompt."""
        prompts = [[int(t) for t in _np.asarray(p).reshape(-1)] for p in prompts]
        return self._native.generate(prompts, max_new_tokens, float(temperature),
                                     top_k, float(top_p), seed, ignore_eos,
                                     kv_cache)

    def save_checkpoint(self, directory):
        """Writes DIR/step-N after the last step (rank 0 writes; the directory
        is locked for this session). Returns the step directory."""
        return self._native.save_checkpoint(_os.fspath(directory))

    def export_hf(self, directory):
        """Writes model.safetensors and config.json for HuggingFace's
        from_pretrained."""
        self._native.export_hf(_os.fspath(directory))

    def load_weights(self, path):
        """Replaces the parameters by a safetensors file's (by HF name)."""
        self._native.load_weights(_os.fspath(path))

    @property
    def device(self):
        return self._native.device

    @property
    def vocabulary_size(self):
        return self._native.vocabulary_size

    @property
    def param_bytes(self):
        """Bytes of this rank's parameters."""
        return self._native.param_bytes

    @property
    def rebalance_status(self):
        """The rebalancer's verdict on the last window ("" without it)."""
        return self._native.rebalance_status

    @property
    def rebalance_events(self):
        """Every re-plan so far: step, action, reason, speeds, bytes moved."""
        return self._native.rebalance_events


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _write_atomically(path, data):
    path = _os.fspath(path)
    directory = _os.path.dirname(_os.path.abspath(path))
    fd, temporary = _tempfile.mkstemp(dir=directory, prefix=".tpc-")
    try:
        with _os.fdopen(fd, "wb") as f:
            f.write(data)
        _os.replace(temporary, path)
    except BaseException:
        _os.unlink(temporary)
        raise
