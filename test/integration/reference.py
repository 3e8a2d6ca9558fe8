#!/usr/bin/env python3
"""Numerical references for tpc's integration tests, from HuggingFace transformers on PyTorch.

Run with the venv that tools/setup-venv.sh creates (Debian's torch 1.13 + pinned transformers):

  .venv/bin/python test/integration/reference.py make-model --model-type gpt2 --out DIR \\
      --seed 1 --batch 2 --seq 16 [--layers 2 --hidden 64 --heads 4 --vocab 96 ...]
  .venv/bin/python test/integration/reference.py compare \\
      --reference DIR/reference.safetensors --actual OUT.safetensors [--rtol 1e-4]

make-model writes into DIR:
  config.json, model.safetensors   model.save_pretrained(DIR, safe_serialization=True) of a small
                                   random model (HF also writes generation_config.json)
  tokens.tokens                    B*S+1 (or --tokens) random token ids, docs/formats.md ("TPCTOKv1", u64 count, u32 ids)
  reference.safetensors            logits [B,S,V] f32 and loss [] f32 from the float32 model, and
                                   logits_f64 / loss_f64 from the same weights in float64
Row b of the batch is tokens[b*S:(b+1)*S]; its targets are tokens[b*S+1:(b+1)*S+1]; loss is the mean
cross-entropy over all B*S positions.

compare checks OUT's logits and loss against the float64 reference: rel = max|actual - ref64| /
max|ref64| per tensor; exit 1 when a rel exceeds --rtol, 2 on usage or I/O errors.
"""

import argparse
import contextlib
import copy
import json
import math
import os
import struct
import sys
import zlib

TOKENS_MAGIC = b"TPCTOKv1"

# Initialisation. HF's default (normal, std 0.02) gives almost uniform logits for small models, so the
# reference would not exercise much. Instead every matrix is N(0, 1/fan_in) (activations stay O(1)
# through the network), embeddings and the output head are scaled so the logits have a standard
# deviation of a few units, norm weights are 1 + N(0, NORM_STD) and biases N(0, BIAS_STD).
NORM_STD = 0.1
BIAS_STD = 0.1
HEAD_GAIN = 2.5  # logits std ~ HEAD_GAIN (final norm output is O(1), head std HEAD_GAIN/sqrt(H))
GPT2_POS_STD = 0.5  # GPT-2 position embeddings, relative to the token embedding std of 1/sqrt(H)*gain


class UsageError(Exception):
    """A problem with the command line or the input files: exit status 2."""


def _import_torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:  # pragma: no cover - environment problem
        raise UsageError(f"cannot import torch ({e}); run with the venv from tools/setup-venv.sh")
    return torch


# ----------------------------------------------------------------------------------------------------
# make-model
# ----------------------------------------------------------------------------------------------------


def _generator(seed, name):
    """A generator seeded from the model seed and a tensor name, so tensors do not depend on order."""
    import torch

    g = torch.Generator()
    g.manual_seed((seed * 0x9E3779B1 + zlib.crc32(name.encode())) % (1 << 63))
    return g


def _normal_(tensor, std, mean, seed, name):
    import torch

    with torch.no_grad():
        values = torch.randn(tensor.shape, generator=_generator(seed, name), dtype=torch.float64)
        tensor.copy_((values * std + mean).to(tensor.dtype))


def _init_weights(model, model_type, seed):
    """Deterministic, O(1)-logit initialisation of every parameter (tied ones once)."""
    import torch
    from torch import nn
    from transformers.pytorch_utils import Conv1D

    hidden = model.config.hidden_size
    done = set()

    def init(param, name, std, mean=0.0):
        if id(param) in done:  # a tied parameter, already initialised under its first name
            return
        done.add(id(param))
        _normal_(param, std, mean, seed, name)

    norm_types = (nn.LayerNorm,)
    if model_type == "llama":
        from transformers.models.llama.modeling_llama import LlamaRMSNorm

        norm_types = (nn.LayerNorm, LlamaRMSNorm)

    for mname, module in model.named_modules():
        if isinstance(module, norm_types):
            init(module.weight, mname + ".weight", NORM_STD, 1.0)
            if getattr(module, "bias", None) is not None:
                init(module.bias, mname + ".bias", NORM_STD)
        elif isinstance(module, nn.Embedding):
            if mname.endswith("wpe"):
                std = GPT2_POS_STD * HEAD_GAIN / math.sqrt(hidden)
            elif model_type == "gpt2" or model.config.tie_word_embeddings:
                std = HEAD_GAIN / math.sqrt(hidden)  # also the output head
            else:
                std = 1.0  # LLaMA input embedding, fed to an RMSNorm
            init(module.weight, mname + ".weight", std)
        elif isinstance(module, nn.Linear):  # weight [out, in]
            gain = HEAD_GAIN if mname == "lm_head" else 1.0
            init(module.weight, mname + ".weight", gain / math.sqrt(module.weight.shape[1]))
            if module.bias is not None:
                init(module.bias, mname + ".bias", BIAS_STD)
        elif isinstance(module, Conv1D):  # GPT-2: weight [in, out], y = x @ W + b
            init(module.weight, mname + ".weight", 1.0 / math.sqrt(module.weight.shape[0]))
            init(module.bias, mname + ".bias", BIAS_STD)

    missing = [n for n, p in model.named_parameters() if id(p) not in done]
    if missing:
        raise RuntimeError(f"parameters left uninitialised: {missing}")
    assert all(p.dtype == torch.float32 for p in model.parameters())


def _build_model(args):
    import torch

    torch.manual_seed(args.seed)
    if args.model_type == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        if args.kv_heads is not None and args.kv_heads != args.heads:
            raise UsageError("--kv-heads must equal --heads for gpt2 (no grouped-query attention)")
        if args.rope_theta is not None:
            raise UsageError("--rope-theta is a llama option")
        config = GPT2Config(
            vocab_size=args.vocab,
            n_positions=args.max_positions,
            n_embd=args.hidden,
            n_layer=args.layers,
            n_head=args.heads,
            n_inner=args.intermediate,
            activation_function="gelu_new",
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            layer_norm_epsilon=args.norm_eps if args.norm_eps is not None else 1e-5,
            initializer_range=0.02,
            tie_word_embeddings=args.tie if args.tie is not None else True,
            bos_token_id=args.vocab - 1,  # HF's default 50256 would lie outside the small vocabulary
            eos_token_id=args.vocab - 1,
            attn_implementation="eager",
        )
        model = GPT2LMHeadModel(config)
    else:
        from transformers import LlamaConfig, LlamaForCausalLM

        kv_heads = args.kv_heads if args.kv_heads is not None else args.heads
        if args.heads % kv_heads != 0:
            raise UsageError(f"--kv-heads ({kv_heads}) must divide --heads ({args.heads})")
        if (args.hidden // args.heads) % 2 != 0:
            raise UsageError("the head dimension --hidden/--heads must be even for rotary embeddings")
        config = LlamaConfig(
            vocab_size=args.vocab,
            hidden_size=args.hidden,
            intermediate_size=args.intermediate if args.intermediate is not None else 4 * args.hidden,
            num_hidden_layers=args.layers,
            num_attention_heads=args.heads,
            num_key_value_heads=kv_heads,
            hidden_act="silu",
            max_position_embeddings=args.max_positions,
            rms_norm_eps=args.norm_eps if args.norm_eps is not None else 1e-6,
            rope_theta=args.rope_theta if args.rope_theta is not None else 10000.0,
            tie_word_embeddings=args.tie if args.tie is not None else False,
            attention_bias=False,
            mlp_bias=False,
            attention_dropout=0.0,
            initializer_range=0.02,
            attn_implementation="eager",
        )
        model = LlamaForCausalLM(config)
    _init_weights(model, args.model_type, args.seed)
    return model.float().eval()


@contextlib.contextmanager
def _exact_float64(model_type):
    """Makes a float64 forward really float64.

    HF LLaMA (4.46) computes three things in float32 whatever the model dtype: RMSNorm (casts the input
    to float32), the rotary cos/sin (forced float32, then cast to the model dtype) and the attention
    softmax (dtype=torch.float32). In a float64 model that would leave float32 rounding in the
    "float64" reference, so while this context is active those run in float64 for float64 inputs.
    Float32 inputs take the original code paths. GPT-2 has no such casts on its eager path.
    """
    if model_type != "llama":
        yield
        return
    import torch
    from transformers.models.llama import modeling_llama as ml

    orig_norm = ml.LlamaRMSNorm.forward
    orig_rope = ml.LlamaRotaryEmbedding.forward
    orig_softmax = torch.nn.functional.softmax

    def norm_forward(self, x):
        if x.dtype != torch.float64:
            return orig_norm(self, x)
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))

    def rope_forward(self, x, position_ids):
        if x.dtype != torch.float64:
            return orig_rope(self, x, position_ids)
        if self.rope_type != "default":
            raise RuntimeError(f"float64 rotary: unsupported rope_type {self.rope_type}")
        dim = 2 * self.inv_freq.shape[0]
        inv_freq = 1.0 / (self.config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        freqs = position_ids[:, :, None].to(torch.float64) * inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos() * self.attention_scaling, emb.sin() * self.attention_scaling

    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        if dtype is not None and input.dtype == torch.float64:
            dtype = None
        return orig_softmax(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

    ml.LlamaRMSNorm.forward = norm_forward
    ml.LlamaRotaryEmbedding.forward = rope_forward
    torch.nn.functional.softmax = softmax
    try:
        yield
    finally:
        ml.LlamaRMSNorm.forward = orig_norm
        ml.LlamaRotaryEmbedding.forward = orig_rope
        torch.nn.functional.softmax = orig_softmax


def _forward(model, input_ids, targets):
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        logits = model(input_ids=input_ids, use_cache=False).logits
        vocab = logits.shape[-1]
        loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), reduction="mean")
    return logits.contiguous(), loss


def write_tokens(path, ids):
    import numpy as np

    ids = np.asarray(ids, dtype="<u4")
    with open(path, "wb") as f:
        f.write(TOKENS_MAGIC + struct.pack("<Q", ids.size) + ids.tobytes())


def read_tokens(path):
    import numpy as np

    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 16 or data[:8] != TOKENS_MAGIC:
        raise UsageError(f"{path}: not a token file (magic {TOKENS_MAGIC!r})")
    (count,) = struct.unpack("<Q", data[8:16])
    if len(data) != 16 + 4 * count:
        raise UsageError(f"{path}: size {len(data)} != 16 + 4 * {count}")
    return np.frombuffer(data, dtype="<u4", offset=16).astype(np.int64)


def make_model(args):
    torch = _import_torch()
    import transformers
    from safetensors.torch import save_file

    for flag in ("batch", "seq", "layers", "hidden", "heads", "vocab"):
        if getattr(args, flag) <= 0:
            raise UsageError(f"--{flag} must be positive")
    if args.hidden % args.heads != 0:
        raise UsageError(f"--heads ({args.heads}) must divide --hidden ({args.hidden})")
    if args.max_positions is None:
        args.max_positions = max(2 * args.seq, 32)
    if args.max_positions < args.seq:
        raise UsageError(f"--max-positions ({args.max_positions}) < --seq ({args.seq})")

    torch.set_num_threads(1)  # fixed reduction order: the float32 reference is reproducible
    model = _build_model(args)
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)

    count = max(args.tokens or 0, args.batch * args.seq + 1)
    tokens = torch.randint(0, args.vocab, (count,), generator=_generator(args.seed, "tokens"))
    write_tokens(os.path.join(args.out, "tokens.tokens"), tokens.numpy())

    n = args.batch * args.seq
    input_ids = tokens[:n].reshape(args.batch, args.seq)
    targets = tokens[1 : n + 1].reshape(args.batch, args.seq)
    logits, loss = _forward(model, input_ids, targets)
    model64 = copy.deepcopy(model).double()
    with _exact_float64(args.model_type):
        logits64, loss64 = _forward(model64, input_ids, targets)
    assert logits.dtype == torch.float32 and logits64.dtype == torch.float64

    metadata = {
        "model_type": args.model_type,
        "seed": str(args.seed),
        "batch": str(args.batch),
        "seq": str(args.seq),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    save_file(
        {"logits": logits, "loss": loss.reshape(()), "logits_f64": logits64, "loss_f64": loss64.reshape(())},
        os.path.join(args.out, "reference.safetensors"),
        # One metadata entry: safetensors stores metadata in a hash map, so several keys would be written
        # in a random order and the file would not be byte-for-byte reproducible.
        metadata={"tpc_reference": json.dumps(metadata, sort_keys=True)},
    )

    scale = logits64.abs().max().item()
    f32_rel = (logits.double() - logits64).abs().max().item() / max(scale, 1e-30)
    probs = torch.softmax(logits64, dim=-1)
    print(
        f"make-model: {args.model_type} -> {args.out}: logits [{args.batch},{args.seq},{args.vocab}] "
        f"std={logits64.std().item():.3f} max|logit|={scale:.3f} mean max-prob={probs.max(-1).values.mean().item():.3f} "
        f"loss={loss64.item():.6f} (ln V={math.log(args.vocab):.3f}) torch f32-vs-f64 rel={f32_rel:.2e}"
    )
    return 0


# ----------------------------------------------------------------------------------------------------
# compare
# ----------------------------------------------------------------------------------------------------


def _load(path, what):
    from safetensors.numpy import load_file

    if not os.path.isfile(path):
        raise UsageError(f"{what} file not found: {path}")
    try:
        return load_file(path)
    except Exception as e:  # safetensors raises several types for corrupt files
        raise UsageError(f"{what} file {path} is not a readable safetensors file: {e}")


def compare(args):
    import numpy as np

    if not (args.rtol >= 0.0 and math.isfinite(args.rtol)):
        raise UsageError("--rtol must be a non-negative number")
    ref = _load(args.reference, "reference")
    act = _load(args.actual, "actual")

    # Validate everything before printing anything, so a usage error is one clean line.
    names = ("logits", "loss")
    for name in names:
        for tensors, path, key in ((ref, args.reference, name), (ref, args.reference, name + "_f64"),
                                   (act, args.actual, name)):
            if key not in tensors:
                raise UsageError(f"{path}: missing tensor '{key}' (has: {', '.join(sorted(tensors)) or 'none'})")
        if ref[name].shape != ref[name + "_f64"].shape:
            raise UsageError(f"{args.reference}: '{name}' and '{name}_f64' differ in shape")
        if act[name].shape != ref[name].shape:
            raise UsageError(f"{args.actual}: tensor '{name}' has shape {list(act[name].shape)}, "
                             f"reference has {list(ref[name].shape)}")
        if not np.issubdtype(act[name].dtype, np.floating):
            raise UsageError(f"{args.actual}: tensor '{name}' has dtype {act[name].dtype}, expected float32")

    failures = []
    for name in names:
        ref64 = ref[name + "_f64"].astype(np.float64)
        ref32 = ref[name].astype(np.float64)
        actual = act[name].astype(np.float64)

        scale = float(np.max(np.abs(ref64))) if ref64.size else 0.0
        denom = max(scale, 1e-30)
        finite = bool(np.all(np.isfinite(actual)))
        err = float(np.max(np.abs(actual - ref64))) if finite and actual.size else (0.0 if finite else math.inf)
        rel = err / denom
        torch_rel = (float(np.max(np.abs(ref32 - ref64))) if ref64.size else 0.0) / denom
        ok = rel <= args.rtol
        note = "" if finite else " (actual has NaN/Inf)"
        dtype_note = "" if act[name].dtype == np.float32 else f" [actual dtype {act[name].dtype}]"
        print(f"{name:6s}: max_abs_err={err:.3e} max|ref|={scale:.3e} rel={rel:.3e} "
              f"(torch f32-vs-f64 rel={torch_rel:.3e}) {'OK' if ok else 'FAIL'}{note}{dtype_note}")
        if not ok:
            failures.append(f"{name} rel={rel:.3e} > rtol={args.rtol:.1e}")

    sys.stdout.flush()
    if failures:
        print(f"compare: FAIL: {'; '.join(failures)} (vs float64 reference {args.reference})", file=sys.stderr)
        return 1
    print(f"compare: PASS (rtol={args.rtol:.1e})")
    return 0


# ----------------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser():
    p = _Parser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    m = sub.add_parser("make-model", help="build a small random HF model, tokens and reference outputs")
    m.add_argument("--model-type", choices=("gpt2", "llama"), required=True)
    m.add_argument("--out", required=True, help="output directory (created)")
    m.add_argument("--seed", type=int, required=True)
    m.add_argument("--batch", type=int, required=True)
    m.add_argument("--seq", type=int, required=True)
    m.add_argument("--layers", type=int, default=2)
    m.add_argument("--hidden", type=int, default=64)
    m.add_argument("--heads", type=int, default=4)
    m.add_argument("--kv-heads", type=int, default=None, help="llama: key/value heads (GQA); default --heads")
    m.add_argument("--intermediate", type=int, default=None, help="MLP width; default 4*hidden")
    m.add_argument("--vocab", type=int, default=96)
    m.add_argument("--max-positions", type=int, default=None,
                   help="n_positions / max_position_embeddings; default max(2*seq, 32)")
    m.add_argument("--norm-eps", type=float, default=None,
                   help="layer_norm_epsilon (gpt2, default 1e-5) / rms_norm_eps (llama, default 1e-6)")
    tie = m.add_mutually_exclusive_group()
    tie.add_argument("--tie", dest="tie", action="store_true", default=None,
                     help="tie lm_head to the token embedding (default: gpt2 tied, llama untied)")
    tie.add_argument("--no-tie", dest="tie", action="store_false")
    m.add_argument("--rope-theta", type=float, default=None, help="llama rope_theta (default 10000)")
    m.add_argument("--tokens", type=int, default=None,
                   help="length of the token stream (default and minimum: batch*seq+1)")
    m.set_defaults(func=make_model)

    c = sub.add_parser("compare", help="check a runtime's logits/loss against a reference")
    c.add_argument("--reference", required=True, help="reference.safetensors from make-model")
    c.add_argument("--actual", required=True, help="safetensors with float32 'logits' and 'loss'")
    c.add_argument("--rtol", type=float, default=1e-4, help="max allowed max_abs_err / max|ref| (default 1e-4)")
    c.set_defaults(func=compare)
    return p


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"reference.py {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
