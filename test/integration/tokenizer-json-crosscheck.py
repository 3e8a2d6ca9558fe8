#!/usr/bin/env python3
"""tpc-tokenize --tokenizer tokenizer.json against HuggingFace `tokenizers`, live.

  tokenizer-json-crosscheck.py --tokenize BIN/tpc-tokenize --work WORK_DIR TEXT_FILE_OR_DIR...

Trains a byte-level BPE tokenizer of GPT-2's kind with HuggingFace's
`tokenizers` (3000 tokens; special tokens "<|endoftext|>" and "<|pad|>", a
plain added token "<tpc>") on part of the text, saves its tokenizer.json,
and tokenises a corpus of several MB (the text files, a directory standing
for its *.md files and its files without an extension (the fortunes),
sorted; the tricky mixed-Unicode text of
bpe-crosscheck.py under eight seeds; each document followed by
"<|endoftext|>", with added tokens next to each other, inside words and cut
short) with both: every id must be equal, and decode must give back the
text. The merges are checked in both of the file's spellings ("a b" and
["a", "b"]). Then the one-line errors for a corrupt file and for a field
tpc does not read yet. Exits 1 at the first mismatch, naming its position.
"""
import argparse
import copy
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
bpe_crosscheck = __import__("bpe-crosscheck")


def corpus(paths):
    documents = []
    for path in map(Path, paths):
        files = ([f for f in sorted(path.iterdir()) if f.is_file() and f.suffix in ("", ".md")]
                 if path.is_dir() else [path])
        documents += [f.read_text(encoding="utf-8", errors="replace") for f in files]
    documents += [bpe_crosscheck.tricky_text(seed, 20000) for seed in range(8)]
    # Added tokens between documents, back to back, inside a word, and
    # their prefixes, which are plain text.
    text = "<|endoftext|>".join(documents)
    text += "a<|endoftext|><|endoftext|>b<|pad|><tpc>x<|endof <tpc <|endoftext|"
    return text


def train(text, path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=3000, special_tokens=["<|endoftext|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator([text[i:i + 4096] for i in range(0, len(text), 4096)], trainer)
    tokenizer.add_tokens(["<tpc>"])
    tokenizer.save(str(path))
    return tokenizer


def tpc_ids(tokenize, tokenizer_json, text_path, out):
    result = subprocess.run([tokenize, str(text_path), "-o", str(out), "--tokenizer", str(tokenizer_json)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"tokenizer-json-crosscheck: tpc-tokenize failed: {result.stderr.strip()}")
    return bpe_crosscheck.read_tokens(out)


def compare(name, expected, actual):
    if expected == actual:
        print(f"{name}: {len(actual)} tokens identical")
        return
    at = next((i for i, (a, b) in enumerate(zip(expected, actual)) if a != b), min(len(expected), len(actual)))
    sys.exit(f"tokenizer-json-crosscheck: {name}: token {at} differs: HF {expected[at:at + 5]}, "
             f"tpc {actual[at:at + 5]} ({len(expected)} against {len(actual)} tokens)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenize", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("texts", nargs="+")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)

    text = corpus(args.texts)
    text_path = work / "corpus.txt"
    text_path.write_bytes(text.encode("utf-8"))
    size = text_path.stat().st_size
    if size < 3_000_000:
        sys.exit(f"tokenizer-json-crosscheck: the corpus has only {size} bytes")
    tokenizer_json = work / "tokenizer.json"
    hf = train(text[: len(text) // 4], tokenizer_json)
    expected = hf.encode(text).ids
    print(f"corpus: {size} bytes; HF tokenizers: {len(expected)} tokens, vocab {hf.get_vocab_size()}")
    for token in ("<|endoftext|>", "<|pad|>", "<tpc>"):
        if hf.token_to_id(token) not in expected:
            sys.exit(f"tokenizer-json-crosscheck: the corpus never yields {token}")

    actual = tpc_ids(args.tokenize, tokenizer_json, text_path, work / "corpus.tokens")
    compare("tokenizer.json", expected, actual)
    if hf.decode(actual, skip_special_tokens=False) != text:
        sys.exit("tokenizer-json-crosscheck: HF's decode of tpc's ids is not the text")

    # The other spelling of the merges.
    data = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    merges = data["model"]["merges"]
    other = copy.deepcopy(data)
    other["model"]["merges"] = [m.split(" ") if isinstance(m, str) else " ".join(m) for m in merges]
    other_path = work / "tokenizer-other-merges.json"
    other_path.write_text(json.dumps(other), encoding="utf-8")
    compare("merges spelt " + ("as pairs" if isinstance(merges[0], str) else "as strings"),
            expected, tpc_ids(args.tokenize, other_path, text_path, work / "other.tokens"))

    # One-line errors.
    broken = work / "broken.json"
    broken.write_text(tokenizer_json.read_text(encoding="utf-8")[:1000], encoding="utf-8")
    normalized = copy.deepcopy(data)
    normalized["normalizer"] = {"type": "NFC"}
    normalized_path = work / "normalizer.json"
    normalized_path.write_text(json.dumps(normalized), encoding="utf-8")
    for path, message in ((broken, "not a JSON object (tokenizer.json)"),
                          (normalized_path, "normalizer is set; only GPT-2's byte-level BPE")):
        result = subprocess.run([args.tokenize, str(text_path), "-o", str(work / "x.tokens"),
                                 "--tokenizer", str(path)], capture_output=True, text=True)
        lines = result.stderr.strip().splitlines()
        if result.returncode == 0 or len(lines) != 1 or message not in lines[0]:
            sys.exit(f"tokenizer-json-crosscheck: {path.name}: expected one error line with "
                     f"{message!r}, got rc {result.returncode}: {result.stderr!r}")
    if (work / "x.tokens").exists():
        sys.exit("tokenizer-json-crosscheck: a failed run left an output file")
    print("errors: corrupt file and unsupported normalizer, one line each")


if __name__ == "__main__":
    main()
