#!/usr/bin/env python3
"""tpc-tokenize's GPT-2 BPE against HuggingFace's GPT2Tokenizer, live.

  bpe-crosscheck.py --tokenize BIN/tpc-tokenize --fixtures test/runtime/Inputs/bpe
                    --work WORK_DIR TEXT_FILE_OR_DIR...

Runs tpc-tokenize on the text files (a directory stands for its *.md files,
sorted) plus a generated file of tricky text
(every Unicode class the pre-tokenisation pattern tells apart, mixed at
random with a fixed seed), with the fixture vocab.json + merges.txt, and
compares every token with GPT2Tokenizer's (the slow, pure-Python reference)
encoding of the same concatenated text. Also checks the byte-level mode and
the one-line error for --vocab without --merges. Exits 1 at the first
mismatch, naming its position.
"""
import argparse
import logging
import random
import struct
import subprocess
import sys
from pathlib import Path

# Pieces that exercise the pattern's alternatives and their boundaries.
POOL = [
    "the", "The", " the", " of", " tokens", "token", "ing", "ed", "s", "t",
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'", "''", " '",
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\u00a0", "\u2009",
    "\u3000", "\x0b", "\x0c", "\x1c", "\x85",
    "0", "7", "42", "2024", "3.14", "1e-5", "\u0663", "\u0967", "\u00b2",
    "\u2167", "\u00bd",
    ".", ",", "!", "?", "...", "--", "->", "(", ")", "[x]", "{}", "#", "$",
    "%", "&", "*", "/", "\\", "|", "<", ">", "@", "^", "_", "`", "~", "\u2014",
    "\u201c", "\u201d", "\u00ab", "\u00bb", "\u2026", "\u00a9",
    "caf\u00e9", "na\u00efve", "e\u0301", "\u03a9mega", "\u0394", "\u00df",
    "\u041f\u0440\u0438\u0432\u0435\u0442", "\u0645\u0631\u062d\u0628\u0627",
    "\u65e5\u672c\u8a9e", "\u306b\u307b\u3093", "\ud55c\uad6d\uc5b4",
    "\u0939\u093f\u0928\u094d\u0926\u0940", "\u0e44\u0e17\u0e22",
    "\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469",
    "\U0001d400", "\U00020000", "\ufb01", "\u2160",
]


def tricky_text(seed=20240611, pieces=4000):
    rng = random.Random(seed)
    return "".join(rng.choice(POOL) for _ in range(pieces))


def read_tokens(path):
    data = Path(path).read_bytes()
    if len(data) < 16 or data[:8] != b"TPCTOKv1":
        sys.exit(f"bpe-crosscheck: {path}: not a token file")
    (count,) = struct.unpack("<Q", data[8:16])
    if len(data) != 16 + 4 * count:
        sys.exit(f"bpe-crosscheck: {path}: wrong size for {count} tokens")
    return list(struct.unpack(f"<{count}I", data[16:]))


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def compare(ours, reference, decode, what):
    for i, (a, b) in enumerate(zip(ours, reference)):
        if a != b:
            lo = max(0, i - 8)
            context = decode(reference[lo:i])
            print(f"bpe-crosscheck: {what}: first mismatch at token {i}: "
                  f"tpc-tokenize {ours[i:i + 8]}, GPT2Tokenizer "
                  f"{reference[i:i + 8]} after {context!r}", file=sys.stderr)
            return False
    if len(ours) != len(reference):
        print(f"bpe-crosscheck: {what}: tpc-tokenize gave {len(ours)} tokens, "
              f"GPT2Tokenizer {len(reference)}", file=sys.stderr)
        return False
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenize", required=True)
    parser.add_argument("--fixtures", required=True, type=Path)
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("texts", nargs="+", type=Path)
    args = parser.parse_args()

    logging.getLogger("transformers").setLevel(logging.ERROR)
    from transformers import GPT2Tokenizer

    args.work.mkdir(parents=True, exist_ok=True)
    tricky = args.work / "tricky.txt"
    tricky.write_bytes(tricky_text().encode("utf-8"))
    inputs = []
    for path in args.texts:
        inputs += sorted(map(str, path.glob("*.md"))) if path.is_dir() else [str(path)]
    inputs.append(str(tricky))
    raw = b"".join(Path(p).read_bytes() for p in inputs)
    text = raw.decode("utf-8")
    vocab, merges = args.fixtures / "vocab.json", args.fixtures / "merges.txt"
    ok = True

    def check_bpe(merges, label, stem):
        """tpc-tokenize with `merges` against GPT2Tokenizer: (same, ids)."""
        out = args.work / f"{stem}.tokens"
        result = run([args.tokenize, *inputs, "-o", str(out), "--vocab",
                      str(vocab), "--merges", str(merges)])
        if result.returncode != 0:
            sys.exit(f"bpe-crosscheck: tpc-tokenize failed: {result.stderr.strip()}")
        print(result.stdout.strip())
        ours = read_tokens(out)
        # split_special_tokens: "<|endoftext|>" in the text is plain text, as
        # for tpc-tokenize.
        reference_tokenizer = GPT2Tokenizer(str(vocab), str(merges),
                                            split_special_tokens=True)
        reference = reference_tokenizer.encode(text)
        decode = lambda ids: reference_tokenizer.decode(
            ids, clean_up_tokenization_spaces=False)
        return compare(ours, reference, decode, label), reference

    # GPT-2 BPE.
    same, reference = check_bpe(merges, "BPE", "bpe")
    ok &= same

    # A merges file that repeats pairs: GPT2Tokenizer's rank dict keeps the
    # last occurrence, so the first three merges drop to the lowest priority.
    # The repeat must change the encoding, or this check would prove nothing.
    lines = merges.read_text(encoding="utf-8").splitlines()
    repeated = args.work / "repeated-merges.txt"
    repeated.write_text("\n".join(lines + lines[1:4]) + "\n", encoding="utf-8")
    same, repeated_reference = check_bpe(repeated, "BPE with repeated merges",
                                         "repeated")
    ok &= same
    if repeated_reference == reference:
        print("bpe-crosscheck: repeating merges changed no token; the check "
              "has no teeth", file=sys.stderr)
        ok = False

    # Byte-level.
    out = args.work / "bytes.tokens"
    result = run([args.tokenize, *inputs, "-o", str(out)])
    if result.returncode != 0 or read_tokens(out) != list(raw):
        print(f"bpe-crosscheck: byte-level tokens are not the input bytes "
              f"({result.stderr.strip()})", file=sys.stderr)
        ok = False

    # --vocab without --merges: one line on stderr, exit 1, no output.
    out = args.work / "half.tokens"
    out.unlink(missing_ok=True)
    result = run([args.tokenize, inputs[0], "-o", str(out), "--vocab",
                  str(vocab)])
    if (result.returncode != 1 or result.stderr.count("\n") != 1 or
            "--merges" not in result.stderr or out.exists()):
        print(f"bpe-crosscheck: --vocab without --merges: exit "
              f"{result.returncode}, stderr {result.stderr!r}", file=sys.stderr)
        ok = False

    if not ok:
        return 1
    print(f"bpe-crosscheck: {len(reference)} tokens of {len(raw)} bytes "
          f"({len(inputs)} files) match GPT2Tokenizer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
